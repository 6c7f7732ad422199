//! Saving and restoring [`Adam`] state as bytes, so a resumed run continues bit for bit.
//!
//! Format (all integers and floats little-endian):
//!
//! | field | type |
//! |---|---|
//! | magic | 8 bytes `EFAADAM1` |
//! | dtype | u8: 4 = f32, 8 = f64 |
//! | step | u64 |
//! | beta1, beta2, eps | f64 ×3 |
//! | placement | u8: 0 textbook, 1 Keras |
//! | decay kind, decay λ | u8 (0 none, 1 decoupled, 2 L2), f64 |
//! | clip flag, clip c | u8 (0/1), f64 |
//! | parallel | u8 |
//! | schedule | u8 tag (0 constant, 1 step, 2 warm-up cosine), then f64 lr, u64 a, u64 b, f64 x |
//! | n_params | u64 |
//! | per parameter | u64 name length, UTF-8 name, u64 ndim, u64 × ndim shape, u64 len, len × T m, len × T v |
//!
//! For the step schedule `a = every`, `x = gamma`; for cosine `a = warmup`, `b = total`,
//! `x = min_lr`; unused fields are 0.

use crate::adam::{Adam, AdamConfig, EpsPlacement, Moments, WeightDecay};
use crate::schedule::Schedule;
use crate::OptimError;
use efa_num::Real;

const MAGIC: &[u8; 8] = b"EFAADAM1";

fn put_u64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}
fn put_f64(out: &mut Vec<u8>, x: f64) {
    out.extend_from_slice(&x.to_le_bytes());
}
fn put_real<T: Real>(out: &mut Vec<u8>, x: T) {
    if T::BYTES == 4 {
        out.extend_from_slice(&(x.to_f64() as f32).to_le_bytes());
    } else {
        out.extend_from_slice(&x.to_f64().to_le_bytes());
    }
}

struct Reader<'b> {
    buf: &'b [u8],
    pos: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize, field: &str) -> Result<&'b [u8], OptimError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err(
                field,
                format!("needs {n} bytes, {} left", self.buf.len() - self.pos),
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn err(&self, field: &str, reason: String) -> OptimError {
        OptimError::Decode {
            offset: self.pos,
            field: field.to_string(),
            reason,
        }
    }
    fn u8(&mut self, field: &str) -> Result<u8, OptimError> {
        Ok(self.take(1, field)?[0])
    }
    fn u64(&mut self, field: &str) -> Result<u64, OptimError> {
        Ok(u64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8 bytes"),
        ))
    }
    fn f64(&mut self, field: &str) -> Result<f64, OptimError> {
        Ok(f64::from_le_bytes(
            self.take(8, field)?.try_into().expect("8 bytes"),
        ))
    }
    fn len(&mut self, field: &str, elem_bytes: usize) -> Result<usize, OptimError> {
        let n = self.u64(field)?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.checked_mul(elem_bytes as u64).is_none_or(|b| b > left) {
            return Err(self.err(field, format!("length {n} exceeds the {left} bytes left")));
        }
        Ok(n as usize)
    }
    fn reals<T: Real>(&mut self, n: usize, field: &str) -> Result<Vec<T>, OptimError> {
        let bytes = self.take(n * T::BYTES, field)?;
        Ok(if T::BYTES == 4 {
            bytes
                .chunks_exact(4)
                .map(|c| T::from_f64(f32::from_le_bytes(c.try_into().expect("4")) as f64))
                .collect()
        } else {
            bytes
                .chunks_exact(8)
                .map(|c| T::from_f64(f64::from_le_bytes(c.try_into().expect("8"))))
                .collect()
        })
    }
}

impl<T: Real> Adam<T> {
    /// Serialises step count, hyper-parameters, schedule and every moment (format in the
    /// module docs). f32 ↔ f64 conversions here are exact, so a round trip is bit-exact.
    pub fn save(&self) -> Vec<u8> {
        let c = &self.config;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.push(T::BYTES as u8);
        put_u64(&mut out, self.step);
        put_f64(&mut out, c.beta1);
        put_f64(&mut out, c.beta2);
        put_f64(&mut out, c.eps);
        out.push(matches!(c.placement, EpsPlacement::Keras) as u8);
        let (kind, lam) = match c.weight_decay {
            WeightDecay::None => (0u8, 0.0),
            WeightDecay::Decoupled(l) => (1, l),
            WeightDecay::L2(l) => (2, l),
        };
        out.push(kind);
        put_f64(&mut out, lam);
        out.push(c.clip_norm.is_some() as u8);
        put_f64(&mut out, c.clip_norm.unwrap_or(0.0));
        out.push(c.parallel as u8);
        let (tag, lr, a, b, x) = match c.schedule {
            Schedule::Constant { lr } => (0u8, lr, 0, 0, 0.0),
            Schedule::Step { lr, every, gamma } => (1, lr, every, 0, gamma),
            Schedule::WarmupCosine {
                lr,
                warmup,
                total,
                min_lr,
            } => (2, lr, warmup, total, min_lr),
        };
        out.push(tag);
        put_f64(&mut out, lr);
        put_u64(&mut out, a);
        put_u64(&mut out, b);
        put_f64(&mut out, x);
        put_u64(&mut out, self.slots.len() as u64);
        for s in &self.slots {
            put_u64(&mut out, s.name.len() as u64);
            out.extend_from_slice(s.name.as_bytes());
            put_u64(&mut out, s.shape.len() as u64);
            for &d in &s.shape {
                put_u64(&mut out, d as u64);
            }
            put_u64(&mut out, s.m.len() as u64);
            for &x in &s.m {
                put_real(&mut out, x);
            }
            for &x in &s.v {
                put_real(&mut out, x);
            }
        }
        out
    }

    /// Restores an optimizer saved by [`Adam::save`]. Fails, naming the byte offset and
    /// field, on a wrong magic, dtype, truncated data, bad tags, inconsistent shapes or
    /// trailing bytes.
    pub fn load(bytes: &[u8]) -> Result<Self, OptimError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        if r.take(8, "magic")? != MAGIC {
            return Err(OptimError::Decode {
                offset: 0,
                field: "magic".into(),
                reason: "not an efa Adam state".into(),
            });
        }
        let dt = r.u8("dtype")?;
        if dt as usize != T::BYTES {
            return Err(r.err(
                "dtype",
                format!("state holds {dt}-byte floats, loading as {}", T::NAME),
            ));
        }
        let step = r.u64("step")?;
        let beta1 = r.f64("beta1")?;
        let beta2 = r.f64("beta2")?;
        let eps = r.f64("eps")?;
        let placement = match r.u8("placement")? {
            0 => EpsPlacement::Textbook,
            1 => EpsPlacement::Keras,
            k => return Err(r.err("placement", format!("unknown tag {k}"))),
        };
        let kind = r.u8("weight_decay.kind")?;
        let lam = r.f64("weight_decay.lambda")?;
        let weight_decay = match kind {
            0 => WeightDecay::None,
            1 => WeightDecay::Decoupled(lam),
            2 => WeightDecay::L2(lam),
            k => return Err(r.err("weight_decay.kind", format!("unknown tag {k}"))),
        };
        let has_clip = r.u8("clip.flag")?;
        let clip = r.f64("clip.norm")?;
        let parallel = r.u8("parallel")? != 0;
        let tag = r.u8("schedule.tag")?;
        let lr = r.f64("schedule.lr")?;
        let a = r.u64("schedule.a")?;
        let b = r.u64("schedule.b")?;
        let x = r.f64("schedule.x")?;
        let schedule = match tag {
            0 => Schedule::Constant { lr },
            1 => Schedule::Step {
                lr,
                every: a,
                gamma: x,
            },
            2 => Schedule::WarmupCosine {
                lr,
                warmup: a,
                total: b,
                min_lr: x,
            },
            k => return Err(r.err("schedule.tag", format!("unknown tag {k}"))),
        };
        let config = AdamConfig {
            schedule,
            beta1,
            beta2,
            eps,
            placement,
            weight_decay,
            clip_norm: (has_clip != 0).then_some(clip),
            parallel,
        };
        let mut adam = Adam::new(config).map_err(|e| r.err("config", e.to_string()))?;
        adam.step = step;
        let n = r.len("n_params", 8)?;
        for _ in 0..n {
            let nl = r.len("name.len", 1)?;
            let name = std::str::from_utf8(r.take(nl, "name")?)
                .map_err(|e| r.err("name", e.to_string()))?
                .to_string();
            let nd = r.len(&format!("{name}.ndim"), 8)?;
            let mut shape = Vec::with_capacity(nd);
            for _ in 0..nd {
                shape.push(r.u64(&format!("{name}.shape"))? as usize);
            }
            let len = r.len(&format!("{name}.len"), 2 * T::BYTES)?;
            if shape.iter().try_fold(1usize, |p, &d| p.checked_mul(d)) != Some(len) {
                return Err(r.err(
                    &format!("{name}.len"),
                    format!("shape {shape:?} does not hold {len} values"),
                ));
            }
            let m = r.reals::<T>(len, &format!("{name}.m"))?;
            let v = r.reals::<T>(len, &format!("{name}.v"))?;
            if adam.index.insert(name.clone(), adam.slots.len()).is_some() {
                return Err(r.err("name", format!("parameter `{name}` appears twice")));
            }
            adam.slots.push(Moments { name, shape, m, v });
        }
        if r.pos != bytes.len() {
            return Err(r.err("end", format!("{} trailing bytes", bytes.len() - r.pos)));
        }
        Ok(adam)
    }
}

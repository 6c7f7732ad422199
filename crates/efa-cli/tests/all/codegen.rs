//! The binary's kernels keep their SIMD intrinsics inline.
//!
//! A kernel body is generic over the vector type and compiled with its instruction set only
//! where the dispatcher that calls it is (`efa_num::simd`). A closure inside such a body (an
//! `std::array::from_fn` argument, a helper bound with `let f = |…|`) is a function of its own,
//! compiled without that instruction set; when the optimiser leaves it out of line, every
//! intrinsic in it becomes a call to an out-of-line copy (`core::core_arch::…::_mm256_fmadd_ps`
//! and the like), several times slower than the instruction. Nothing else notices: the results
//! keep their bits. (This happened once: the lane-batched attention path, causal at the EFA
//! shape, ran 1.8–2.8× slower for it.)
//!
//! So this test reads the symbol table of the `efa` binary cargo built for the tests and
//! fails on any defined function from `core::core_arch`, except the CPU feature probes the
//! standard library itself calls (`_xgetbv`, `__cpuid`).

/// Defined function symbols of an ELF64 little-endian file, by name.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn functions(elf: &[u8]) -> Result<Vec<String>, String> {
    let u16_at = |o: usize| -> Result<usize, String> {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or(format!("ELF truncated at byte {o}"))
    };
    let u32_at = |o: usize| -> Result<usize, String> {
        elf.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or(format!("ELF truncated at byte {o}"))
    };
    let u64_at = |o: usize| -> Result<usize, String> {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .ok_or(format!("ELF truncated at byte {o}"))
    };
    if elf.get(..5) != Some(b"\x7fELF\x02") || elf.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)?, u16_at(0x3a)?, u16_at(0x3c)?);
    let section = |i: usize| shoff + i * shentsize;
    let mut names = Vec::new();
    for i in 0..shnum {
        let sh = section(i);
        // SHT_SYMTAB: the full (static) symbol table, its names in the section `sh_link` names.
        if u32_at(sh + 4)? != 2 {
            continue;
        }
        let (off, size, entsize) = (u64_at(sh + 24)?, u64_at(sh + 32)?, u64_at(sh + 56)?);
        let strtab = u64_at(section(u32_at(sh + 40)?) + 24)?;
        for s in (off..off + size).step_by(entsize.max(24)) {
            let (info, shndx) = (elf.get(s + 4).copied().unwrap_or(0), u16_at(s + 6)?);
            // STT_FUNC, defined in the file.
            if info & 0xf != 2 || shndx == 0 {
                continue;
            }
            let start = strtab + u32_at(s)?;
            let tail = elf.get(start..).ok_or("symbol name past the end")?;
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            names.push(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
    }
    Ok(names)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn no_simd_intrinsic_is_left_out_of_line() {
    let path = env!("CARGO_BIN_EXE_efa");
    let elf = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let names = functions(&elf).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        names.iter().any(|n| n.contains("efa_attn")),
        "{path}: no efa_attn function in the symbol table (stripped binary?)"
    );
    let probes = ["_xgetbv", "__cpuid"];
    let outlined: Vec<&String> = names
        .iter()
        .filter(|n| n.contains("core_arch") && !probes.iter().any(|p| n.contains(p)))
        .collect();
    assert!(
        outlined.is_empty(),
        "{path}: {} out-of-line SIMD intrinsics, e.g. {:?}: a closure (or a function without \
         #[inline(always)]) in a kernel body calls them; write it as an #[inline(always)] fn \
         or a loop",
        outlined.len(),
        &outlined[..outlined.len().min(5)]
    );
}

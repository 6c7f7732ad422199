//! The whole public reference file: every case in f64, the f32_exact_inputs cases in f32,
//! with the README's tolerance rule.

use crate::common;

use efa_expfam::refcheck::check_case;
use efa_num::Real;

fn run<T: Real>(only_f32_exact: bool) -> usize {
    let cases = common::load_cases();
    assert_eq!(cases.len(), 146, "public reference set has 146 cases");
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases
        .iter()
        .filter(|c| !only_f32_exact || c.f32_exact_inputs)
    {
        checked += 1;
        match check_case::<T>(case) {
            Ok(fields) => {
                for f in fields.iter().filter(|f| !f.pass) {
                    failures.push(format!(
                        "{} {}: got {:e} want {:e} (ratio {:.3e})",
                        case.id, f.field, f.got, f.want, f.ratio
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", case.id)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} {} failures:\n{}",
        T::NAME,
        failures.len(),
        failures.join("\n")
    );
    checked
}

#[test]
#[ignore = "needs the expfam reference values (EFA_REFERENCE)"]
fn all_cases_pass_in_f64() {
    assert_eq!(run::<f64>(false), 146);
}

#[test]
#[ignore = "needs the expfam reference values (EFA_REFERENCE)"]
fn f32_exact_cases_pass_in_f32() {
    assert!(run::<f32>(true) > 50);
}

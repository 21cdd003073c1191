//! Lesson 05's Rust exercise: the learner's `launch_grid` against the launcher's own `Manifest::resolve`.
//! Built by `kernels.export.rust_exercise` into a crate of its own, beside the learner's `src/lib.rs`.

use std::path::Path;

use workbook_launch::Manifest;
use yours::launch_grid;

fn fixture(name: &str) -> Manifest {
    let dir = std::env::var("WORKBOOK_FIXTURES").expect("WORKBOOK_FIXTURES names rust/tests/fixtures");
    Manifest::load(Path::new(&dir).join(name), None).expect("the crate's fixture manifests parse")
}

fn sizes(kv: &[(&str, i64)]) -> Vec<(String, i64)> {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn the_grid_is_the_launchers_for_the_lessons_kernels() {
    let la = fixture("linear_attention.json");
    for (b, t, h, k, v) in [(1, 1, 1, 16, 16), (2, 1000, 4, 128, 128), (4, 4096, 16, 128, 72), (3, 77, 5, 100, 130)] {
        let s = sizes(&[("B", b), ("T", t), ("H", h), ("K", k), ("V", v)]);
        let want = la.resolve(&s).expect("a valid problem").grid;
        assert_eq!(launch_grid(&la, &s), Ok(want), "linear attention at B={b} T={t} H={h} K={k} V={v}");
    }
    let va = fixture("vector_add.json");
    for n in [1, 1000, 1024, 1025, 2147483647 - 1024] {
        let s = sizes(&[("n_elements", n)]);
        let want = va.resolve(&s).expect("a valid problem").grid;
        assert_eq!(launch_grid(&va, &s), Ok(want), "vector add at n_elements={n}");
    }
}

#[test]
fn a_grid_past_cudas_limits_is_refused() {
    let la = fixture("linear_attention.json");
    // B*H = 70000 programs along y, where CUDA allows 65535
    let s = sizes(&[("B", 70000), ("T", 1), ("H", 1), ("K", 16), ("V", 16)]);
    assert!(la.resolve(&s).is_err());
    let got = launch_grid(&la, &s);
    assert!(got.is_err(), "grid y = 70000 must be refused, got {got:?}");
}

#[test]
fn a_missing_size_is_refused() {
    let la = fixture("linear_attention.json");
    let s = sizes(&[("B", 2), ("T", 100), ("H", 4), ("K", 64)]);
    let got = launch_grid(&la, &s);
    assert!(got.is_err(), "V is missing, got {got:?}");
}

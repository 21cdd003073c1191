//! Lesson 05's Rust exercise: the learner's `launch_grid` against the launcher's own `Manifest::resolve` and
//! CUDA's limits. Built by `kernels.export.rust_exercise` into a crate of its own, beside the learner's
//! `src/lib.rs`. Each failure names the fault: axes swapped, a ceiling division off by one, a limit off by one or
//! applied to the wrong axis, a value wrapped around in `u32`, a zero-sized grid, a missing refusal (of an
//! unknown size among them).
//!
//! With `WORKBOOK_GRID_CASES` set (a file of cases the grader draws), `graded_cases` writes what `launch_grid`
//! returned for each to `WORKBOOK_GRID_REPORT`, for the grader to compare with its own reading of the manifests.

use std::path::Path;

use workbook_launch::Manifest;
use yours::launch_grid;

const AXES: [&str; 3] = ["x", "y", "z"];
const LIMITS: [i64; 3] = [2_147_483_647, 65_535, 65_535];

fn fixture(name: &str) -> Manifest {
    let dir = std::env::var("WORKBOOK_FIXTURES").expect("WORKBOOK_FIXTURES names rust/tests/fixtures");
    Manifest::load(Path::new(&dir).join(name), None).expect("the crate's fixture manifests parse")
}

/// A manifest whose grid is `grid` over the sizes `names`, with no constexprs and no requirements.
fn grid_only(grid: [&str; 3], names: &[&str]) -> Manifest {
    let mut m = fixture("vector_add.json");
    m.kernel = "grid_only".to_string();
    m.constexprs = Vec::new();
    m.requires = Vec::new();
    m.sizes = names.iter().map(|s| s.to_string()).collect();
    m.grid = grid.map(|g| g.to_string());
    m
}

fn sizes(kv: &[(&str, i64)]) -> Vec<(String, i64)> {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// What is wrong with `got`, where the grid should be `want`: `None` when it is right.
fn diagnose(got: &Result<[u32; 3], String>, want: [u32; 3], what: &str) -> Option<String> {
    let g = match got {
        Err(e) => return Some(format!("{what}: refused ({e}), but the grid {want:?} is a valid launch")),
        Ok(g) if *g == want => return None,
        Ok(g) => *g,
    };
    let why = if want[0] != want[1] && g == [want[1], want[0], want[2]] {
        "x and y are swapped: grid[0] is the manifest's first grid expression, grid[1] its second".to_string()
    } else if want[0] != want[2] && g == [want[2], want[1], want[0]] {
        "the axes are reversed: grid[0] is the manifest's first grid expression (x), grid[2] its last (z)".to_string()
    } else {
        let axis = (0..3).find(|&a| g[a] != want[a]).unwrap_or(0);
        let (got_a, want_a) = (g[axis] as i64, want[axis] as i64);
        if got_a == want_a + 1 {
            format!(
                "one program too many along {}: a ceiling division off by one (cdiv(a, b) is (a + b - 1) / b, \
                 not a / b + 1 or (a + b) / b, which add a program when b divides a)",
                AXES[axis]
            )
        } else if got_a + 1 == want_a {
            format!(
                "one program too few along {}: off by one, a floor division drops the last partial block \
                 (cdiv(a, b) is (a + b - 1) / b)",
                AXES[axis]
            )
        } else {
            format!("grid {} is {got_a}, expected {want_a}: evaluate the manifest's expression", AXES[axis])
        }
    };
    Some(format!("{what}: grid {g:?}, expected {want:?}: {why}"))
}

fn assert_grid(m: &Manifest, s: &[(String, i64)], want: [u32; 3], what: &str) {
    if let Some(why) = diagnose(&launch_grid(m, s), want, what) {
        panic!("{why}");
    }
}

fn assert_refused(m: &Manifest, s: &[(String, i64)], what: &str, hint: &str) {
    match launch_grid(m, s) {
        Err(e) if e.trim().is_empty() => panic!("{what}: refused with an empty message; say what is wrong"),
        Err(_) => {}
        Ok(g) => panic!("{what} must be refused, but launch_grid returned Ok({g:?}): {hint}"),
    }
}

#[test]
fn the_grid_is_the_launchers_for_the_lessons_kernels() {
    let la = fixture("linear_attention.json");
    let shapes =
        [(1, 1, 1, 16, 16), (2, 1000, 4, 128, 128), (4, 4096, 16, 128, 72), (3, 77, 5, 100, 130), (1, 9, 2, 64, 1)];
    for (b, t, h, k, v) in shapes {
        let s = sizes(&[("B", b), ("T", t), ("H", h), ("K", k), ("V", v)]);
        let want = la.resolve(&s).expect("a valid problem").grid;
        assert_grid(&la, &s, want, &format!("linear attention at B={b} T={t} H={h} K={k} V={v}"));
    }
    let va = fixture("vector_add.json");
    for n in [1, 1000, 1023, 1024, 1025, 4096, 2147483647 - 1024] {
        let s = sizes(&[("n_elements", n)]);
        let want = va.resolve(&s).expect("a valid problem").grid;
        assert_grid(&va, &s, want, &format!("vector add at n_elements={n}"));
    }
}

#[test]
fn each_axis_is_its_own_expression() {
    let m = grid_only(["X", "Y", "Z"], &["X", "Y", "Z"]);
    assert_grid(&m, &sizes(&[("X", 5), ("Y", 7), ("Z", 3)]), [5, 7, 3], "grid (X, Y, Z) at X=5 Y=7 Z=3");
    let m = grid_only(["cdiv(N, 64)", "B * H", "2"], &["N", "B", "H"]);
    assert_grid(&m, &sizes(&[("N", 640), ("B", 3), ("H", 5)]), [10, 15, 2], "grid (cdiv(N, 64), B * H, 2) at N=640");
}

#[test]
fn cudas_limits_are_inclusive_and_per_axis() {
    let m = grid_only(["X", "Y", "Z"], &["X", "Y", "Z"]);
    let accepts = |axis: usize, v: i64| {
        let mut vals = [1i64; 3];
        vals[axis] = v;
        launch_grid(&m, &sizes(&[("X", vals[0]), ("Y", vals[1]), ("Z", vals[2])])).is_ok()
    };
    for axis in 0..3 {
        if accepts(axis, LIMITS[axis]) {
            continue;
        }
        let why = if accepts(axis, LIMITS[axis] - 1) {
            "off by one: CUDA's limits are inclusive".to_string()
        } else if axis == 0 && accepts(0, 65_535) {
            "the wrong limit for x: 65535 is the limit of y and z, x allows up to 2^31 - 1".to_string()
        } else {
            format!("{} allows up to {}", AXES[axis], LIMITS[axis])
        };
        panic!("grid {} = {} (the most CUDA allows) was refused: {why}", AXES[axis], LIMITS[axis]);
    }
    let most = sizes(&[("X", LIMITS[0]), ("Y", LIMITS[1]), ("Z", LIMITS[2])]);
    assert_grid(&m, &most, [2_147_483_647, 65_535, 65_535], "the largest grid CUDA allows");
}

#[test]
fn a_grid_past_cudas_limits_is_refused() {
    let la = fixture("linear_attention.json");
    // B*H = 70000 programs along y, where CUDA allows 65535
    let s = sizes(&[("B", 70000), ("T", 1), ("H", 1), ("K", 16), ("V", 16)]);
    assert!(la.resolve(&s).is_err());
    assert_refused(&la, &s, "linear attention with B*H = 70000 (grid y)", "the limit of y is 65535");
    let m = grid_only(["X", "Y", "Z"], &["X", "Y", "Z"]);
    for axis in 0..3 {
        let mut v = [1i64; 3];
        v[axis] = LIMITS[axis] + 1;
        let s = sizes(&[("X", v[0]), ("Y", v[1]), ("Z", v[2])]);
        assert_refused(
            &m,
            &s,
            &format!("grid {} = {}", AXES[axis], v[axis]),
            &format!("the limit of {} is {} (off by one, or the wrong limit for this axis)", AXES[axis], LIMITS[axis]),
        );
    }
}

#[test]
fn a_grid_past_u32_is_refused_not_wrapped() {
    let m = grid_only(["X", "Y", "Z"], &["X", "Y", "Z"]);
    for (axis, v) in [(0, (1i64 << 32) + 1), (1, (1i64 << 32) + 7), (2, (1i64 << 32) + 2), (0, (1i64 << 33) + 5)] {
        let mut vals = [1i64; 3];
        vals[axis] = v;
        let s = sizes(&[("X", vals[0]), ("Y", vals[1]), ("Z", vals[2])]);
        assert_refused(
            &m,
            &s,
            &format!("grid {} = {v}", AXES[axis]),
            &format!(
                "u32 overflow: {v} wraps around to {} as u32; compare the i64 value with the limit before \
                 converting (u32::try_from, or a range check first)",
                v as u32
            ),
        );
    }
    let m = grid_only(["X * Y", "1", "1"], &["X", "Y"]);
    assert_refused(
        &m,
        &sizes(&[("X", 1 << 20), ("Y", 1 << 20)]),
        "grid x = X * Y = 2^40",
        "u32 overflow: 2^40 wraps around to 0 as u32; compare the i64 value with the limit before converting",
    );
}

#[test]
fn an_empty_or_negative_grid_is_refused() {
    let va = fixture("vector_add.json");
    assert_refused(
        &va,
        &sizes(&[("n_elements", 0)]),
        "vector add at n_elements=0 (grid x = cdiv(0, 1024) = 0)",
        "a zero-sized grid launches nothing, and CUDA refuses it: every axis must be at least 1",
    );
    let m = grid_only(["X", "Y", "Z"], &["X", "Y", "Z"]);
    assert_refused(
        &m,
        &sizes(&[("X", 4), ("Y", 0), ("Z", 1)]),
        "grid y = 0",
        "a zero-sized grid: every axis must be at least 1",
    );
    assert_refused(
        &m,
        &sizes(&[("X", -3), ("Y", 1), ("Z", 1)]),
        "grid x = -3",
        "a negative grid (-3 wraps around to 4294967293 as u32): every axis must be at least 1",
    );
}

#[test]
fn a_missing_size_is_refused() {
    let la = fixture("linear_attention.json");
    let s = sizes(&[("B", 2), ("T", 100), ("H", 4), ("K", 64)]);
    assert_refused(&la, &s, "linear attention without V", "V is a size the manifest lists, and it is missing");
}

#[test]
fn an_unknown_size_is_refused() {
    let va = fixture("vector_add.json");
    let s = sizes(&[("n_elements", 1000), ("N", 1000)]);
    assert_refused(
        &va,
        &s,
        "vector add given an unknown size N",
        "an unknown size: the manifest lists n_elements only; a size it does not list is a typo or another \
         kernel's, and the launcher refuses it",
    );
}

#[test]
fn an_expression_that_fails_is_refused() {
    let m = grid_only(["cdiv(N, BLOCK)", "1", "1"], &["N", "BLOCK"]);
    assert_refused(
        &m,
        &sizes(&[("N", 100), ("BLOCK", 0)]),
        "grid x = cdiv(N, BLOCK) with BLOCK=0",
        "the expression fails (cdiv by 0): pass evaluate's error on",
    );
}

/// The grader's cases: each line `MANIFEST<TAB>NAME=VALUE,...`, where MANIFEST is a fixture's file name or three
/// grid expressions joined by `|` (a manifest of that grid over the named sizes). One report line per case:
/// `ok X Y Z`, `err` or `panic`.
#[test]
fn graded_cases() {
    let (Ok(cases), Ok(report)) = (std::env::var("WORKBOOK_GRID_CASES"), std::env::var("WORKBOOK_GRID_REPORT")) else {
        return;
    };
    let text = std::fs::read_to_string(&cases).expect("the grader's cases");
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (which, kv) = line.split_once('\t').expect("MANIFEST<TAB>SIZES");
        let s: Vec<(String, i64)> = kv
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').expect("NAME=VALUE");
                (k.to_string(), v.parse().expect("an integer"))
            })
            .collect();
        let m = if which.ends_with(".json") {
            fixture(which)
        } else {
            let g: Vec<&str> = which.split('|').collect();
            let names: Vec<&str> = s.iter().map(|(k, _)| k.as_str()).collect();
            grid_only([g[0], g[1], g[2]], &names)
        };
        out += &match std::panic::catch_unwind(|| launch_grid(&m, &s)) {
            Ok(Ok(g)) => format!("ok {} {} {}\n", g[0], g[1], g[2]),
            Ok(Err(_)) => "err\n".to_string(),
            Err(_) => "panic\n".to_string(),
        };
    }
    std::fs::write(&report, out).expect("writing the report");
}

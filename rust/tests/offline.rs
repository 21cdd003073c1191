//! Everything that works without a GPU: manifests, plans, parameter packing and the CLI's error paths.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use workbook_launch::cli::{parse_args, prepare};
use workbook_launch::manifest::{Kind, Manifest, Role};
use workbook_launch::{pack, Error};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn sizes(kv: &[(&str, i64)]) -> Vec<(String, i64)> {
    kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("workbook-launch-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn edited(name: &str, from: &str, to: &str, tag: &str) -> PathBuf {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    assert!(text.contains(from), "fixture {name} lacks {from:?}");
    let p = tmpdir(tag).join(name);
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    p
}

#[test]
fn vector_add_manifest_parses_and_resolves() {
    let m = Manifest::load(fixture("vector_add.json"), Some("3.6.0")).unwrap();
    assert_eq!(m.entry, "_naive_vector_add_kernel");
    assert_eq!(m.params.len(), 4);
    assert_eq!(m.params.iter().map(|p| p.ty.as_str()).collect::<Vec<_>>(), ["*fp32", "*fp32", "*fp32", "i32"]);
    assert_eq!(m.threads_per_block, 128);
    assert_eq!(m.scratch.len(), 2);
    let plan = m.resolve(&sizes(&[("n_elements", 1000)])).unwrap();
    assert_eq!(plan.grid, [1, 1, 1]);
    assert_eq!(plan.bytes("x_ptr"), Some(4000));
    let plan = m.resolve(&sizes(&[("n_elements", 5000)])).unwrap();
    assert_eq!(plan.grid, [5, 1, 1]);
    assert_eq!(plan.scalars, vec![("n_elements".to_string(), 5000)]);
}

#[test]
fn linear_attention_strides_grid_and_requirements() {
    let m = Manifest::load(fixture("linear_attention.json"), None).unwrap();
    let plan = m.resolve(&sizes(&[("B", 2), ("T", 100), ("H", 3), ("K", 32), ("V", 96)])).unwrap();
    let bv = m.constexprs.iter().find(|(k, _)| k == "BV").unwrap().1.as_i64().unwrap();
    assert_eq!(plan.grid, [((96 + bv - 1) / bv) as u32, 6, 1]);
    let get = |n: &str| plan.scalars.iter().find(|(k, _)| k == n).unwrap().1;
    assert_eq!((get("stride_qb"), get("stride_qt"), get("stride_qh")), (100 * 3 * 32, 3 * 32, 32));
    assert_eq!((get("stride_vb"), get("stride_ot")), (100 * 3 * 96, 3 * 96));
    assert_eq!(plan.bytes("o_ptr"), Some(2 * 100 * 3 * 96 * 2));
    assert_eq!(plan.bytes("h0_ptr"), Some(0), "unused pointers take no memory");
    let e = m.resolve(&sizes(&[("B", 1), ("T", 10), ("H", 1), ("K", 300), ("V", 8)])).unwrap_err();
    assert!(e.to_string().contains("K <= BK") && e.to_string().contains("K=300"), "{e}");
    let e = m.resolve(&sizes(&[("B", 700), ("T", 1), ("H", 100), ("K", 8), ("V", 8)])).unwrap_err();
    assert!(e.to_string().contains("grid axis y") && e.to_string().contains("70000"), "{e}");
    let e = m.resolve(&sizes(&[("B", 1), ("T", 1), ("H", 1), ("K", 8)])).unwrap_err();
    assert!(e.to_string().contains("missing sizes V"), "{e}");
    let e = m.resolve(&sizes(&[("B", 1), ("T", 1), ("H", 1), ("K", 8), ("V", 8), ("Q", 1)])).unwrap_err();
    assert!(e.to_string().contains("unknown size \"Q\""), "{e}");
}

#[test]
fn packing_follows_the_manifest_and_appends_two_null_scratch_pointers() {
    let m = Manifest::load(fixture("vector_add.json"), None).unwrap();
    let plan = m.resolve(&sizes(&[("n_elements", 1000)])).unwrap();
    let ptrs: HashMap<String, u64> = [("x_ptr", 0x1000u64), ("y_ptr", 0x2000), ("out_ptr", 0x3000)]
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    let p = pack(&m, &plan, &ptrs, &HashMap::new(), [0, 0]).unwrap();
    assert_eq!(p.len(), 6);
    assert_eq!(&p[0].bytes, &0x1000u64.to_le_bytes());
    assert_eq!(p[3].len, 4);
    assert_eq!(&p[3].bytes[..4], &1000i32.to_le_bytes());
    assert_eq!((p[4].bytes, p[5].bytes), ([0; 8], [0; 8]));

    let mut bad = ptrs.clone();
    bad.insert("y_ptr".into(), 0x2004);
    let e = pack(&m, &plan, &bad, &HashMap::new(), [0, 0]).unwrap_err();
    assert!(e.to_string().contains("not 16-byte aligned"), "{e}");
    let mut missing = ptrs.clone();
    missing.remove("out_ptr");
    assert!(pack(&m, &plan, &missing, &HashMap::new(), [0, 0])
        .unwrap_err()
        .to_string()
        .contains("no buffer for pointer out_ptr"));
    let extra: HashMap<String, f64> = [("n_elements".to_string(), 5.0)].into();
    assert!(pack(&m, &plan, &ptrs, &extra, [0, 0]).unwrap_err().to_string().contains("computed from the sizes"));
    let unknown: HashMap<String, f64> = [("alpha".to_string(), 5.0)].into();
    assert!(pack(&m, &plan, &ptrs, &unknown, [0, 0]).unwrap_err().to_string().contains("no parameter \"alpha\""));
}

#[test]
fn float_scalars_are_required_and_packed_as_f32() {
    let m = Manifest::load(fixture("linear_attention.json"), None).unwrap();
    let plan = m.resolve(&sizes(&[("B", 1), ("T", 10), ("H", 2), ("K", 16), ("V", 16)])).unwrap();
    let ptrs: HashMap<String, u64> = m
        .params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Pointer { role: Role::In | Role::Out | Role::InOut, .. }))
        .map(|p| (p.name.clone(), 1 << 20))
        .collect();
    let e = pack(&m, &plan, &ptrs, &HashMap::new(), [0, 0]).unwrap_err();
    assert!(e.to_string().contains("scalar scale (fp32) needs a value"), "{e}");
    let scale: HashMap<String, f64> = [("scale".to_string(), 0.25)].into();
    let p = pack(&m, &plan, &ptrs, &scale, [0, 0]).unwrap();
    assert_eq!(p.len(), m.params.len() + 2);
    let i = m.params.iter().position(|q| q.name == "scale").unwrap();
    assert_eq!(&p[i].bytes[..4], &0.25f32.to_bits().to_le_bytes());
    let h0 = m.params.iter().position(|q| q.name == "h0_ptr").unwrap();
    assert_eq!(p[h0].bytes, [0; 8], "unused pointers are NULL");
}

#[test]
fn manifests_from_elsewhere_are_refused_with_the_reason() {
    let e = Manifest::load(fixture("vector_add.json"), Some("3.9.0")).unwrap_err();
    assert!(e.to_string().contains("exported by Triton 3.6.0") && e.to_string().contains("3.9.0"), "{e}");
    let p = edited("vector_add.json", "\"format_version\": 1", "\"format_version\": 2", "fv");
    assert!(Manifest::load(&p, None).unwrap_err().to_string().contains("manifest format version 2"));
    let p = edited("vector_add.json", "\"prefer\": \"ptx\"", "\"prefer\": \"sass\"", "pref");
    assert!(Manifest::load(&p, None).unwrap_err().to_string().contains("prefers \"sass\""));
    let p = edited("vector_add.json", "cdiv(n_elements, BLOCK_SIZE)", "cdiv(n_elements, BLOCK)", "grid");
    assert!(Manifest::load(&p, None).unwrap_err().to_string().contains("uses \"BLOCK\""));
    let p = edited("vector_add.json", "\"kind\": \"scalar\"", "\"kind\": \"tensor\"", "kind");
    assert!(Manifest::load(&p, None).unwrap_err().to_string().contains("unknown parameter kind"));
    let p = edited("vector_add.json", "{", "[", "json");
    assert!(Manifest::load(&p, None).unwrap_err().to_string().contains("JSON error at line"));
    let e = Manifest::load("/nonexistent/m.json", None).unwrap_err();
    assert!(matches!(e, Error::Io(_)) && e.to_string().contains("cannot read the manifest"), "{e}");
}

#[test]
fn cli_checks_files_and_sizes_before_touching_a_gpu() {
    let d = tmpdir("cli");
    let m = fixture("vector_add.json");
    let ms = m.to_str().unwrap();
    std::fs::write(d.join("x.bin"), vec![0u8; 4000]).unwrap();
    std::fs::write(d.join("short.bin"), vec![0u8; 3996]).unwrap();
    let x = d.join("x.bin");
    let short = d.join("short.bin");
    let (xs, ys) = (format!("x_ptr={}", x.display()), format!("y_ptr={}", x.display()));
    let shorts = format!("y_ptr={}", short.display());
    // `run` of the fixture at n_elements = 1000, then `more`
    let run = |more: &[&str]| args(&[&["run", "--manifest", ms, "--size", "n_elements=1000"], more].concat());
    let job = prepare(&parse_args(&run(&["--in", &xs, "--in", &ys, "--out", "out_ptr=o.bin"])).unwrap(), true).unwrap();
    assert_eq!(job.inputs.len(), 3);
    let job = prepare(&parse_args(&run(&["--arg", &xs, "--arg", &ys])).unwrap(), true).unwrap();
    assert!(job.inputs.iter().all(|(_, d)| d.as_ref().map(|b| b.len()) == Some(4000) || d.is_none()));
    let e = parse_args(&run(&["--arg", "alpha=2"])).and_then(|a| prepare(&a, true)).unwrap_err();
    assert!(e.to_string().contains("no parameter \"alpha\""), "{e}");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            run(&["--in", &xs, "--in", &shorts]),
            "holds 3996 bytes, but n_elements = 1000 elements of 4 bytes is 4000 bytes",
        ),
        (run(&["--in", &xs]), "needs --in y_ptr=FILE"),
        (run(&["--in", "out_ptr=x.bin"]), "not an input"),
        (run(&["--out", "x_ptr=o.bin"]), "not an output"),
        (args(&["run", "--manifest", ms, "--size", "n=1000"]), "unknown size \"n\""),
        (args(&["run", "--manifest", ms]), "missing sizes n_elements"),
        (args(&["run", "--manifest", ms, "--size", "n_elements=0"]), "requirement \"n_elements >= 1\" fails"),
        (run(&["--in", "x_ptr=/nonexistent/x.bin"]), "cannot read"),
        (run(&["--in", &xs, "--in", &ys, "--scalar", "n_elements=3"]), "computed from the sizes"),
        (
            args(&["run", "--manifest", ms, "--expect-triton", "3.9.0", "--size", "n_elements=1"]),
            "exported by Triton 3.6.0",
        ),
    ];
    for (argv, want) in cases {
        let e = parse_args(&argv).and_then(|a| prepare(&a, true)).unwrap_err();
        assert!(e.to_string().contains(want), "{argv:?}: {e}");
    }
    for (argv, want) in [
        (args(&["launch"]), "unknown command"),
        (args(&["run", "--size"]), "--size needs a value"),
        (args(&["run", "--size", "n_elements"]), "NAME=VALUE"),
        (args(&["run", "--size", "n_elements=x"]), "not a valid number"),
        (args(&["run", "--grid", "0,1"]), "positive integers"),
        (args(&["run", "--image", "sass"]), "ptx or cubin"),
        (args(&["run", "--frobnicate"]), "unknown option"),
    ] {
        let e = parse_args(&argv).unwrap_err();
        assert!(e.to_string().contains(want), "{argv:?}: {e}");
    }
}

#[test]
fn images_are_checked_against_the_manifest() {
    let d = tmpdir("sha");
    let m = Manifest::load(fixture("vector_add.json"), None).unwrap();
    let want = &m.sha256.iter().find(|(k, _)| k == "ptx").unwrap().1;
    assert_eq!(want.len(), 64);
    let text = std::fs::read_to_string(fixture("vector_add.json")).unwrap();
    std::fs::write(d.join("vector_add.json"), &text).unwrap();
    std::fs::write(d.join("vector_add.ptx"), "//\n.version 8.7\n").unwrap();
    let m = Manifest::load(d.join("vector_add.json"), None).unwrap();
    let e = workbook_launch::read_image(&m, Some("ptx")).unwrap_err();
    assert!(e.to_string().contains("does not match its manifest") && e.to_string().contains(want.as_str()), "{e}");
    let e = workbook_launch::read_image(&m, Some("cubin")).unwrap_err();
    assert!(e.to_string().contains("cannot read the cubin image"), "{e}");
}

#[test]
fn binary_reports_a_missing_driver_clearly() {
    let d = tmpdir("bin");
    std::fs::write(d.join("x.bin"), vec![0u8; 40]).unwrap();
    let x = d.join("x.bin").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_workbook-launch"))
        .args([
            "run",
            "--manifest",
            fixture("vector_add.json").to_str().unwrap(),
            "--size",
            "n_elements=10",
            "--in",
            &format!("x_ptr={x}"),
            "--in",
            &format!("y_ptr={x}"),
        ])
        .env("WORKBOOK_LIBCUDA", "/nonexistent/libcuda.so.1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("cannot load /nonexistent/libcuda.so.1") && err.contains("NVIDIA driver"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_workbook-launch"))
        .args(["info", "--manifest", fixture("linear_attention.json").to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("_chunked_linear_attention_kernel") && text.contains("scale"),
        "{text}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_workbook-launch")).args(["bench"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--manifest M.json is required"));
}

#[test]
fn exit_codes_tell_the_kinds_of_error_apart() {
    let driver = Error::Driver { call: "cuInit".into(), code: 100, name: "".into(), description: "".into() };
    let errors = [
        Error::Argument("".into()),
        Error::Io("".into()),
        Error::Manifest("".into()),
        Error::Library("".into()),
        driver,
    ];
    let codes: Vec<i32> = errors.iter().map(workbook_launch::cli::exit_code).collect();
    assert_eq!(codes, [2, 2, 3, 4, 5]);
}

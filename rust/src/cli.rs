//! The `workbook-launch` command line. Everything that can be checked without a GPU (manifest, sizes, scalars,
//! input files and their sizes) is checked before the driver is loaded.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use crate::cuda::{CudaContext, CudaSlice};
use crate::error::{Error, Result};
use crate::exported::{pack, read_image, Exported};
use crate::manifest::{Kind, Manifest, Plan, Role};

pub const USAGE: &str = "\
workbook-launch: launch a kernel exported by `python -m kernels.export` through the CUDA driver API

usage:
  workbook-launch info    --manifest M.json
  workbook-launch run     --manifest M.json --size NAME=INT... [--scalar NAME=NUM...] [--in PARAM=FILE...]
                          [--out PARAM=FILE...] [--image ptx|cubin] [--grid X[,Y[,Z]]] [--device N]
                          [--expect-triton VERSION]
                          (--arg NAME=VALUE is --in for a pointer parameter, --scalar for a scalar)
  workbook-launch bench   (the options of run) [--launches N] [--repeat R] [--warmup W]
  workbook-launch devices

Input files hold the raw little-endian elements of one buffer (exactly the size the manifest gives for the
sizes); inputs not given are zero-filled for bench. Outputs start as 0xFF bytes (NaN), so unwritten elements
show. run and bench print one JSON object on stdout.";

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Args {
    pub command: String,
    pub manifest: Option<PathBuf>,
    pub sizes: Vec<(String, i64)>,
    pub scalars: Vec<(String, f64)>,
    pub inputs: Vec<(String, PathBuf)>,
    pub outputs: Vec<(String, PathBuf)>,
    /// `--arg NAME=VALUE`: an input file for a pointer parameter, a number for a scalar (decided by the manifest).
    pub args: Vec<(String, String)>,
    pub image: Option<String>,
    pub grid: Option<[u32; 3]>,
    pub device: usize,
    pub expect_triton: Option<String>,
    pub launches: usize,
    pub repeat: usize,
    pub warmup: usize,
}

fn pair(flag: &str, v: &str) -> Result<(String, String)> {
    match v.split_once('=') {
        Some((k, val)) if !k.is_empty() && !val.is_empty() => Ok((k.to_string(), val.to_string())),
        _ => Err(Error::Argument(format!("{flag} wants NAME=VALUE, got {v:?}"))),
    }
}

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T> {
    v.parse::<T>().map_err(|_| Error::Argument(format!("{flag}: {v:?} is not a valid number")))
}

pub fn parse_args(argv: &[String]) -> Result<Args> {
    let mut a = Args { launches: 2000, repeat: 15, warmup: 200, ..Args::default() };
    let mut it = argv.iter();
    a.command = it.next().cloned().ok_or_else(|| Error::Argument(format!("no command given\n\n{USAGE}")))?;
    if !["info", "run", "bench", "devices", "help", "--help", "-h"].contains(&a.command.as_str()) {
        return Err(Error::Argument(format!("unknown command {:?}\n\n{USAGE}", a.command)));
    }
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| Error::Argument(format!("{flag} needs a value")));
        match flag.as_str() {
            "--manifest" => a.manifest = Some(PathBuf::from(value()?)),
            "--size" => {
                let (k, v) = pair(flag, &value()?)?;
                a.sizes.push((k, number(flag, &v)?));
            }
            "--scalar" => {
                let (k, v) = pair(flag, &value()?)?;
                a.scalars.push((k, number(flag, &v)?));
            }
            "--arg" => a.args.push(pair(flag, &value()?)?),
            "--in" => {
                let (k, v) = pair(flag, &value()?)?;
                a.inputs.push((k, PathBuf::from(v)));
            }
            "--out" => {
                let (k, v) = pair(flag, &value()?)?;
                a.outputs.push((k, PathBuf::from(v)));
            }
            "--image" => {
                let v = value()?;
                if v != "ptx" && v != "cubin" {
                    return Err(Error::Argument(format!("--image is ptx or cubin, got {v:?}")));
                }
                a.image = Some(v);
            }
            "--grid" => {
                let v = value()?;
                let parts: Vec<u32> = v.split(',').map(|p| number::<u32>(flag, p.trim())).collect::<Result<_>>()?;
                if parts.is_empty() || parts.len() > 3 || parts.contains(&0) {
                    return Err(Error::Argument(format!("--grid wants 1 to 3 positive integers X[,Y[,Z]], got {v:?}")));
                }
                let mut g = [1u32; 3];
                g[..parts.len()].copy_from_slice(&parts);
                a.grid = Some(g);
            }
            "--device" => a.device = number(flag, &value()?)?,
            "--expect-triton" => a.expect_triton = Some(value()?),
            "--launches" => a.launches = number(flag, &value()?)?,
            "--repeat" => a.repeat = number(flag, &value()?)?,
            "--warmup" => a.warmup = number(flag, &value()?)?,
            other => return Err(Error::Argument(format!("unknown option {other:?}\n\n{USAGE}"))),
        }
    }
    if a.launches == 0 || a.repeat == 0 {
        return Err(Error::Argument("--launches and --repeat must be at least 1".into()));
    }
    Ok(a)
}

/// What a launch needs on the host, checked against the manifest: no GPU involved.
#[derive(Debug)]
pub struct HostJob {
    pub manifest: Manifest,
    pub plan: Plan,
    /// Bytes for each used pointer parameter, in manifest order (`None`: allocate, 0xFF for outputs).
    pub inputs: Vec<(String, Option<Vec<u8>>)>,
    pub outputs: Vec<(String, PathBuf)>,
    pub scalars: HashMap<String, f64>,
    /// The image to load ("ptx" or "cubin") and its bytes, checked against the manifest's SHA-256.
    pub image: (String, Vec<u8>),
}

pub fn prepare(a: &Args, need_all_inputs: bool) -> Result<HostJob> {
    let path = a.manifest.as_ref().ok_or_else(|| Error::Argument("--manifest M.json is required".into()))?;
    let manifest = Manifest::load(path, a.expect_triton.as_deref())?;
    let mut plan = manifest.resolve(&a.sizes)?;
    if let Some(g) = a.grid {
        plan.grid = g;
    }
    let mut seen = Vec::new();
    for (k, _) in a.sizes.iter() {
        if seen.contains(k) {
            return Err(Error::Argument(format!("--size {k} given twice")));
        }
        seen.push(k.clone());
    }
    let find = |name: &str| manifest.params.iter().find(|p| p.name == name);
    let mut a = a.clone();
    for (name, value) in std::mem::take(&mut a.args) {
        match find(&name).map(|p| &p.kind) {
            Some(Kind::Pointer { .. }) => a.inputs.push((name, PathBuf::from(value))),
            Some(Kind::Scalar { .. }) => a.scalars.push((name.clone(), number(&format!("--arg {name}"), &value)?)),
            None => {
                return Err(Error::Argument(format!("--arg {name}: {} has no parameter {name:?}", manifest.kernel)))
            }
        }
    }
    let a = &a;
    for (flag, files, role_wanted, what) in
        [("--in", &a.inputs, Role::In, "an input"), ("--out", &a.outputs, Role::Out, "an output")]
    {
        for (name, _) in files {
            match find(name).map(|p| &p.kind) {
                Some(Kind::Pointer { role, .. }) if *role == role_wanted || *role == Role::InOut => {}
                Some(Kind::Pointer { role, .. }) => {
                    return Err(Error::Argument(format!("{flag} {name}: that buffer is {role:?}, not {what}")))
                }
                _ => {
                    return Err(Error::Argument(format!(
                        "{flag} {name}: {} has no pointer parameter {name:?}",
                        manifest.kernel
                    )))
                }
            }
        }
    }
    let mut inputs = Vec::new();
    for p in manifest.pointers() {
        let Kind::Pointer { role, numel, element_bytes, .. } = &p.kind else { unreachable!() };
        if *role == Role::Unused {
            continue;
        }
        let want = plan.bytes(&p.name).expect("every pointer has a size");
        let file = a.inputs.iter().find(|(n, _)| *n == p.name).map(|(_, f)| f);
        let data = match (role, file) {
            (_, Some(f)) => {
                let bytes = std::fs::read(f)
                    .map_err(|e| Error::Io(format!("--in {}: cannot read {}: {e}", p.name, f.display())))?;
                if bytes.len() as u64 != want {
                    return Err(Error::Argument(format!(
                        "--in {}: {} holds {} bytes, but {numel} = {} elements of {element_bytes} bytes is {want} bytes",
                        p.name,
                        f.display(),
                        bytes.len(),
                        want / *element_bytes as u64
                    )));
                }
                Some(bytes)
            }
            (Role::In | Role::InOut, None) if need_all_inputs => {
                return Err(Error::Argument(format!("input buffer {} needs --in {}=FILE", p.name, p.name)))
            }
            _ => None,
        };
        inputs.push((p.name.clone(), data));
    }
    let scalars: HashMap<String, f64> = a.scalars.iter().cloned().collect();
    // Pack once with fake, aligned addresses so every scalar and pointer error shows before the GPU is touched.
    let fake: HashMap<String, u64> = inputs.iter().map(|(n, _)| (n.clone(), 1 << 20)).collect();
    pack(&manifest, &plan, &fake, &scalars, [0, 0])?;
    let image = read_image(&manifest, a.image.as_deref())?;
    Ok(HostJob { manifest, plan, inputs, outputs: a.outputs.clone(), scalars, image })
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn info(m: &Manifest) -> String {
    let mut s = format!(
        "{}: .entry {} (Triton {}, PTX ISA {}, prefer {})\n  {} threads/block, {} B dynamic shared, grid ({})\n",
        m.kernel,
        m.entry,
        m.triton_version,
        m.ptx_isa.as_deref().unwrap_or("?"),
        m.prefer,
        m.threads_per_block,
        m.shared_bytes,
        m.grid.join(", ")
    );
    s.push_str(&format!("  sizes: {}\n", m.sizes.join(", ")));
    for p in &m.params {
        match &p.kind {
            Kind::Pointer { role, numel, .. } => {
                s.push_str(&format!("  {:<12} {:<6} {role:?} [{numel}]\n", p.name, p.ty))
            }
            Kind::Scalar { value, .. } => s.push_str(&format!(
                "  {:<12} {:<6} = {}\n",
                p.name,
                p.ty,
                value.as_deref().unwrap_or("(given with --scalar)")
            )),
        }
    }
    for r in &m.scratch {
        s.push_str(&format!("  {:<12} *i8    {} B per program (hidden)\n", r.name, r.bytes_per_program));
    }
    s
}

struct Loaded {
    ex: Exported,
    stream: std::sync::Arc<crate::cuda::CudaStream>,
    buffers: Vec<(String, CudaSlice<u8>)>,
    _scratch: Vec<CudaSlice<u8>>,
    params: Vec<crate::cuda::ParamValue>,
}

fn load(job: &HostJob, a: &Args) -> Result<Loaded> {
    let ctx = CudaContext::new(a.device)?;
    let stream = ctx.new_stream()?;
    let ex = Exported::from_image(&ctx, job.manifest.clone(), job.image.0.clone(), job.image.1.clone())?;
    let mut buffers = Vec::new();
    for (name, data) in &job.inputs {
        let bytes = job.plan.bytes(name).expect("sized") as usize;
        let mut buf = stream.alloc::<u8>(bytes)?;
        match data {
            Some(d) => stream.memcpy_htod(d, &mut buf)?,
            None => {
                let is_out =
                    job.manifest.params.iter().any(|p| {
                        p.name == *name && matches!(p.kind, Kind::Pointer { role: Role::Out | Role::InOut, .. })
                    });
                stream.memset_bytes(&mut buf, if is_out { 0xFF } else { 0 })?;
            }
        }
        buffers.push((name.clone(), buf));
    }
    let mut scratch = Vec::new();
    let mut scratch_ptrs = [0u64; 2];
    for (i, bytes) in job.plan.scratch.iter().enumerate() {
        if *bytes > 0 {
            let buf = stream.alloc_zeros::<u8>(*bytes as usize)?;
            scratch_ptrs[i] = buf.device_ptr();
            scratch.push(buf);
        }
    }
    let ptrs: HashMap<String, u64> = buffers.iter().map(|(n, b)| (n.clone(), b.device_ptr())).collect();
    let params = pack(&job.manifest, &job.plan, &ptrs, &job.scalars, scratch_ptrs)?;
    Ok(Loaded { ex, stream, buffers, _scratch: scratch, params })
}

fn run(job: &HostJob, a: &Args) -> Result<String> {
    let mut l = load(job, a)?;
    let t0 = Instant::now();
    unsafe { l.ex.launch(&l.stream, &job.plan, &mut l.params)? };
    l.stream.synchronize()?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut outs = Vec::new();
    for (name, path) in &job.outputs {
        let (_, buf) = l.buffers.iter().find(|(n, _)| n == name).expect("outputs are checked");
        let host = l.stream.memcpy_dtov(buf)?;
        std::fs::write(path, &host)
            .map_err(|e| Error::Io(format!("--out {name}: cannot write {}: {e}", path.display())))?;
        outs.push(format!("{}: {}", json_str(name), json_str(&path.display().to_string())));
    }
    let g = job.plan.grid;
    Ok(format!(
        "{{\"kernel\": {}, \"image\": {}, \"grid\": [{}, {}, {}], \"block\": {}, \"shared_bytes\": {}, \"ms\": {ms:.4}, \"outputs\": {{{}}}}}",
        json_str(&job.manifest.kernel),
        json_str(&l.ex.image),
        g[0],
        g[1],
        g[2],
        job.plan.block,
        job.plan.shared,
        outs.join(", ")
    ))
}

fn bench(job: &HostJob, a: &Args) -> Result<String> {
    let mut l = load(job, a)?;
    for _ in 0..a.warmup {
        unsafe { l.ex.launch(&l.stream, &job.plan, &mut l.params)? };
    }
    l.stream.synchronize()?;
    let mut per = Vec::with_capacity(a.repeat);
    for _ in 0..a.repeat {
        let t0 = Instant::now();
        for _ in 0..a.launches {
            unsafe { l.ex.launch(&l.stream, &job.plan, &mut l.params)? };
        }
        l.stream.synchronize()?;
        per.push(t0.elapsed().as_secs_f64() * 1e6 / a.launches as f64);
    }
    let mut sorted = per.clone();
    sorted.sort_by(|x, y| x.partial_cmp(y).expect("finite"));
    let median = sorted[sorted.len() / 2];
    let list: Vec<String> = per.iter().map(|v| format!("{v:.3}")).collect();
    Ok(format!(
        "{{\"kernel\": {}, \"image\": {}, \"launches\": {}, \"repeat\": {}, \"median_us\": {median:.3}, \"min_us\": {:.3}, \"per_repeat_us\": [{}]}}",
        json_str(&job.manifest.kernel),
        json_str(&l.ex.image),
        a.launches,
        a.repeat,
        sorted[0],
        list.join(", ")
    ))
}

fn devices() -> Result<String> {
    let (maj, min) = CudaContext::driver_version()?;
    let ctx = CudaContext::new(0)?;
    let (cm, cn) = ctx.compute_capability()?;
    Ok(format!(
        "{{\"driver_cuda\": \"{maj}.{min}\", \"device0\": {}, \"compute_capability\": \"{cm}.{cn}\"}}",
        json_str(&ctx.name()?)
    ))
}

/// The command line's exit status for an error: 2 arguments or files, 3 manifest, 4 driver library, 5 driver call.
pub fn exit_code(e: &Error) -> i32 {
    match e {
        Error::Argument(_) | Error::Io(_) => 2,
        Error::Manifest(_) => 3,
        Error::Library(_) => 4,
        Error::Driver { .. } => 5,
    }
}

/// Run the command line; the text to print on success.
pub fn main_with(argv: &[String]) -> Result<String> {
    let a = parse_args(argv)?;
    match a.command.as_str() {
        "info" => {
            let path = a.manifest.as_ref().ok_or_else(|| Error::Argument("--manifest M.json is required".into()))?;
            Ok(info(&Manifest::load(path, a.expect_triton.as_deref())?))
        }
        "run" => run(&prepare(&a, true)?, &a),
        "bench" => bench(&prepare(&a, false)?, &a),
        "devices" => devices(),
        _ => Ok(USAGE.to_string()),
    }
}

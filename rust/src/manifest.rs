//! The exporter's manifest: parameters in order, images, block, shared memory, grid rule and buffer sizes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::expr;
use crate::json::Json;

pub const FORMAT: &str = "gpu-kernel-workbook/kernel-manifest";
pub const FORMAT_VERSION: i64 = 1;
/// CUDA's limits on gridDim.x, .y and .z.
pub const GRID_LIMITS: [i64; 3] = [(1 << 31) - 1, 65535, 65535];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    In,
    Out,
    InOut,
    Unused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    I32,
    I64,
    U32,
    U64,
    F32,
    F64,
}

impl Scalar {
    pub fn parse(ty: &str) -> Option<Scalar> {
        Some(match ty {
            "i32" => Scalar::I32,
            "i64" => Scalar::I64,
            "u32" => Scalar::U32,
            "u64" => Scalar::U64,
            "fp32" => Scalar::F32,
            "fp64" => Scalar::F64,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F32 | Scalar::F64)
    }

    pub fn range(self) -> (i128, i128) {
        match self {
            Scalar::I32 => (i32::MIN as i128, i32::MAX as i128),
            Scalar::I64 => (i64::MIN as i128, i64::MAX as i128),
            Scalar::U32 => (0, u32::MAX as i128),
            Scalar::U64 => (0, u64::MAX as i128),
            _ => (0, 0),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Pointer { dtype: String, element_bytes: usize, align: u64, role: Role, numel: String },
    Scalar { ty: Scalar, value: Option<String> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub ty: String,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ScratchSpec {
    pub name: String,
    pub bytes_per_program: u64,
    pub align: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub path: PathBuf,
    pub kernel: String,
    pub entry: String,
    pub triton_version: String,
    pub ptx_isa: Option<String>,
    pub ptx_refused: Option<String>,
    pub images: Vec<(String, String)>,
    /// SHA-256 of each image, when the manifest records it.
    pub sha256: Vec<(String, String)>,
    pub prefer: String,
    pub threads_per_block: u32,
    pub shared_bytes: u32,
    pub constexprs: Vec<(String, Json)>,
    pub sizes: Vec<String>,
    pub grid: [String; 3],
    pub requires: Vec<String>,
    pub params: Vec<Param>,
    pub scratch: Vec<ScratchSpec>,
}

fn bad(path: &Path, msg: impl AsRef<str>) -> Error {
    Error::Manifest(format!("{}: {}", path.display(), msg.as_ref()))
}

fn field<'a>(obj: &'a Json, key: &str, path: &Path) -> Result<&'a Json> {
    obj.get(key).ok_or_else(|| bad(path, format!("lacks {key:?}")))
}

fn string(obj: &Json, key: &str, path: &Path) -> Result<String> {
    let v = field(obj, key, path)?;
    v.as_str().map(str::to_string).ok_or_else(|| bad(path, format!("{key:?} must be a string, got {}", v.kind())))
}

fn int(obj: &Json, key: &str, path: &Path) -> Result<i64> {
    let v = field(obj, key, path)?;
    v.as_i64().ok_or_else(|| bad(path, format!("{key:?} must be an integer, got {}", v.kind())))
}

fn opt_string(obj: &Json, key: &str) -> Option<String> {
    obj.get(key).and_then(Json::as_str).map(str::to_string)
}

fn strings(obj: &Json, key: &str, path: &Path) -> Result<Vec<String>> {
    let v = field(obj, key, path)?;
    let items = v.as_array().ok_or_else(|| bad(path, format!("{key:?} must be an array")))?;
    items
        .iter()
        .map(|s| s.as_str().map(str::to_string).ok_or_else(|| bad(path, format!("{key:?} must hold strings"))))
        .collect()
}

impl Manifest {
    /// Read `path`; with `triton_version`, refuse an export from another Triton (its hidden-parameter ABI may differ).
    pub fn load(path: impl AsRef<Path>, triton_version: Option<&str>) -> Result<Manifest> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Io(format!("cannot read the manifest {}: {e}", path.display())))?;
        Manifest::parse(&text, path, triton_version)
    }

    pub fn parse(text: &str, path: &Path, triton_version: Option<&str>) -> Result<Manifest> {
        let j = Json::parse(text).map_err(|e| bad(path, e.to_string()))?;
        if j.get("format").and_then(Json::as_str) != Some(FORMAT) {
            return Err(bad(path, format!("not a kernel manifest (format {FORMAT:?})")));
        }
        let version = int(&j, "format_version", path)?;
        if version != FORMAT_VERSION {
            return Err(bad(
                path,
                format!("manifest format version {version}; this launcher reads {FORMAT_VERSION}: export again"),
            ));
        }
        let triton = string(&j, "triton_version", path)?;
        if let Some(want) = triton_version {
            if triton != want {
                return Err(bad(
                    path,
                    format!(
                        "exported by Triton {triton}, but this launch expects Triton {want}: the kernel ABI \
                         (hidden scratch parameters) may differ; export it again"
                    ),
                ));
            }
        }
        let images: Vec<(String, String)> = field(&j, "images", path)?
            .as_object()
            .ok_or_else(|| bad(path, "\"images\" must be an object"))?
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(|| bad(path, "image names are strings"))?.to_string())))
            .collect::<Result<_>>()?;
        let prefer = string(&j, "prefer", path)?;
        if !images.iter().any(|(k, _)| *k == prefer) {
            return Err(bad(path, format!("prefers {prefer:?}, which is not among its images")));
        }
        let grid_list = strings(&j, "grid", path)?;
        if grid_list.len() != 3 {
            return Err(bad(path, format!("\"grid\" must hold 3 expressions, got {}", grid_list.len())));
        }
        let mut params = Vec::new();
        let raw = field(&j, "params", path)?.as_array().ok_or_else(|| bad(path, "\"params\" must be an array"))?;
        for p in raw {
            let name = string(p, "name", path)?;
            let ty = string(p, "type", path)?;
            let kind = match string(p, "kind", path)?.as_str() {
                "pointer" => {
                    let role = match string(p, "role", path)?.as_str() {
                        "in" => Role::In,
                        "out" => Role::Out,
                        "inout" => Role::InOut,
                        "unused" => Role::Unused,
                        r => return Err(bad(path, format!("{name}: unknown role {r:?}"))),
                    };
                    let element_bytes = int(p, "element_bytes", path)?;
                    let align = int(p, "align", path)?;
                    if !(1..=16).contains(&element_bytes) || align < 1 {
                        return Err(bad(path, format!("{name}: bad element_bytes {element_bytes} or align {align}")));
                    }
                    Kind::Pointer {
                        dtype: string(p, "dtype", path)?,
                        element_bytes: element_bytes as usize,
                        align: align as u64,
                        role,
                        numel: string(p, "numel", path)?,
                    }
                }
                "scalar" => Kind::Scalar {
                    ty: Scalar::parse(&ty)
                        .ok_or_else(|| bad(path, format!("{name}: scalar type {ty:?} is not supported")))?,
                    value: opt_string(p, "value"),
                },
                k => return Err(bad(path, format!("{name}: unknown parameter kind {k:?}"))),
            };
            params.push(Param { name, ty, kind });
        }
        let scratch = field(&j, "scratch", path)?
            .as_array()
            .ok_or_else(|| bad(path, "\"scratch\" must be an array"))?
            .iter()
            .map(|s| {
                Ok(ScratchSpec {
                    name: string(s, "name", path)?,
                    bytes_per_program: int(s, "bytes_per_program", path)?.max(0) as u64,
                    align: int(s, "align", path)?.max(1) as u64,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if scratch.len() != 2 {
            return Err(bad(path, format!("expected 2 scratch pointers (global, profile), got {}", scratch.len())));
        }
        let constexprs = field(&j, "constexprs", path)?
            .as_object()
            .ok_or_else(|| bad(path, "\"constexprs\" must be an object"))?
            .to_vec();
        let threads = int(&j, "threads_per_block", path)?;
        let shared = int(&j, "shared_bytes", path)?;
        if !(1..=1024).contains(&threads) || !(0..=(1 << 20)).contains(&shared) {
            return Err(bad(path, format!("threads_per_block {threads} or shared_bytes {shared} out of range")));
        }
        let m = Manifest {
            path: path.to_path_buf(),
            kernel: string(&j, "kernel", path)?,
            entry: string(&j, "entry", path)?,
            triton_version: triton,
            ptx_isa: opt_string(&j, "ptx_isa"),
            ptx_refused: opt_string(&j, "ptx_refused"),
            images,
            sha256: j
                .get("sha256")
                .and_then(Json::as_object)
                .map(|kv| kv.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
                .unwrap_or_default(),
            prefer,
            threads_per_block: threads as u32,
            shared_bytes: shared as u32,
            constexprs,
            sizes: strings(&j, "sizes", path)?,
            grid: [grid_list[0].clone(), grid_list[1].clone(), grid_list[2].clone()],
            requires: if j.get("requires").is_some() { strings(&j, "requires", path)? } else { Vec::new() },
            params,
            scratch,
        };
        m.check_expressions()?;
        Ok(m)
    }

    fn check_expressions(&self) -> Result<()> {
        let mut known: Vec<String> = self.sizes.clone();
        known.extend(self.constexprs.iter().filter(|(_, v)| v.as_i64().is_some()).map(|(k, _)| k.clone()));
        let mut all: Vec<(String, &str)> = self.grid.iter().map(|g| ("grid".to_string(), g.as_str())).collect();
        all.extend(self.requires.iter().map(|r| ("requirement".to_string(), r.as_str())));
        for p in &self.params {
            match &p.kind {
                Kind::Pointer { numel, .. } => all.push((format!("size of {}", p.name), numel)),
                Kind::Scalar { value: Some(v), .. } => all.push((format!("value of {}", p.name), v)),
                _ => {}
            }
        }
        for (what, text) in all {
            let tree = expr::parse(text).map_err(|e| bad(&self.path, format!("{what}: {e}")))?;
            let mut names = Vec::new();
            expr::names(&tree, &mut names);
            if let Some(n) = names.iter().find(|n| !known.contains(n)) {
                return Err(bad(&self.path, format!("{what} {text:?} uses {n:?}, neither a size nor a constexpr")));
            }
        }
        Ok(())
    }

    /// The image file for `kind` ("ptx" or "cubin"; `None`: the preferred one).
    pub fn image(&self, kind: Option<&str>) -> Result<(String, PathBuf)> {
        let kind = kind.unwrap_or(&self.prefer);
        let (_, file) = self.images.iter().find(|(k, _)| k == kind).ok_or_else(|| {
            let why = match (&self.ptx_refused, kind) {
                (Some(r), "ptx") => format!(": {r}"),
                _ => String::new(),
            };
            bad(&self.path, format!("no {kind} image in this export{why}"))
        })?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        Ok((kind.to_string(), dir.join(file)))
    }

    pub fn pointers(&self) -> impl Iterator<Item = &Param> {
        self.params.iter().filter(|p| matches!(p.kind, Kind::Pointer { .. }))
    }

    /// Evaluate the manifest's expressions for `sizes`: the launch's grid, integer scalars and buffer sizes.
    pub fn resolve(&self, sizes: &[(String, i64)]) -> Result<Plan> {
        let mut env: HashMap<String, i64> = HashMap::new();
        for (k, v) in &self.constexprs {
            if let Some(i) = v.as_i64() {
                env.insert(k.clone(), i);
            }
        }
        for (k, v) in sizes {
            if !self.sizes.contains(k) {
                return Err(Error::Argument(format!(
                    "{}: unknown size {k:?} (it needs {})",
                    self.kernel,
                    self.sizes.join(", ")
                )));
            }
            env.insert(k.clone(), *v);
        }
        let missing: Vec<_> = self.sizes.iter().filter(|s| !sizes.iter().any(|(k, _)| k == *s)).cloned().collect();
        if !missing.is_empty() {
            return Err(Error::Argument(format!(
                "{}: missing sizes {} (give --size NAME=VALUE for each of {})",
                self.kernel,
                missing.join(", "),
                self.sizes.join(", ")
            )));
        }
        let eval =
            |text: &str| expr::evaluate(text, &env).map_err(|e| Error::Argument(format!("{}: {e}", self.kernel)));
        for r in &self.requires {
            if eval(r)? == 0 {
                let mut names = Vec::new();
                expr::names(&expr::parse(r).expect("checked at load"), &mut names);
                let vals: Vec<_> = names.iter().map(|n| format!("{n}={}", env[n])).collect();
                return Err(Error::Argument(format!(
                    "{}: requirement {r:?} fails for {}",
                    self.kernel,
                    vals.join(", ")
                )));
            }
        }
        let mut grid = [0u32; 3];
        for (axis, g) in self.grid.iter().enumerate() {
            let v = eval(g)?;
            if v < 1 || v > GRID_LIMITS[axis] {
                return Err(Error::Argument(format!(
                    "{}: grid axis {} = {g} = {v}, outside CUDA's 1..{}",
                    self.kernel,
                    ["x", "y", "z"][axis],
                    GRID_LIMITS[axis]
                )));
            }
            grid[axis] = v as u32;
        }
        let mut buffers = Vec::new();
        let mut scalars = Vec::new();
        for p in &self.params {
            match &p.kind {
                Kind::Pointer { element_bytes, role, numel, .. } => {
                    let n = if *role == Role::Unused { 0 } else { eval(numel)? };
                    if n < 0 {
                        return Err(Error::Argument(format!("{}: {} has {numel} = {n} elements", self.kernel, p.name)));
                    }
                    let bytes = (n as u64)
                        .checked_mul(*element_bytes as u64)
                        .ok_or_else(|| Error::Argument(format!("{}: {} is too large", self.kernel, p.name)))?;
                    buffers.push((p.name.clone(), bytes));
                }
                Kind::Scalar { ty, value: Some(v) } => {
                    let x = eval(v)?;
                    check_int(&self.kernel, &p.name, *ty, x as i128)?;
                    scalars.push((p.name.clone(), x));
                }
                Kind::Scalar { .. } => {}
            }
        }
        let programs = grid.iter().map(|&g| g as u64).product::<u64>();
        let scratch = [
            self.scratch[0].bytes_per_program.saturating_mul(programs),
            self.scratch[1].bytes_per_program.saturating_mul(programs),
        ];
        Ok(Plan { grid, block: self.threads_per_block, shared: self.shared_bytes, buffers, scalars, scratch })
    }
}

pub fn check_int(kernel: &str, name: &str, ty: Scalar, v: i128) -> Result<()> {
    let (lo, hi) = ty.range();
    if v < lo || v > hi {
        return Err(Error::Argument(format!("{kernel}: {name} = {v} does not fit {ty:?} ({lo}..{hi})")));
    }
    Ok(())
}

/// One launch's numbers, resolved from the sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub grid: [u32; 3],
    pub block: u32,
    pub shared: u32,
    /// Bytes per pointer parameter, in parameter order (0 for unused ones).
    pub buffers: Vec<(String, u64)>,
    /// Integer scalars whose values the manifest computes.
    pub scalars: Vec<(String, i64)>,
    /// Global and profile scratch bytes for the whole grid.
    pub scratch: [u64; 2],
}

impl Plan {
    pub fn bytes(&self, name: &str) -> Option<u64> {
        self.buffers.iter().find(|(n, _)| n == name).map(|(_, b)| *b)
    }
}

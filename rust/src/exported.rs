//! A kernel exported by `python -m kernels.export`, launched from its manifest alone.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cuda::{CudaContext, CudaFunction, CudaModule, CudaStream, Image, LaunchConfig, ParamValue, Ptx};
use crate::error::{Error, Result};
use crate::manifest::{check_int, Kind, Manifest, Plan, Role, Scalar};

/// Pack every parameter, in manifest order, then the two scratch pointers: `pointers` maps each used pointer
/// parameter to a device address, `floats` gives the float scalars (and integer scalars the manifest does not
/// compute). Pure: no GPU needed, so the packing is tested on any machine.
pub fn pack(
    m: &Manifest,
    plan: &Plan,
    pointers: &HashMap<String, u64>,
    scalars: &HashMap<String, f64>,
    scratch: [u64; 2],
) -> Result<Vec<ParamValue>> {
    let mut known: Vec<&str> = m.params.iter().map(|p| p.name.as_str()).collect();
    known.sort();
    for k in pointers.keys().chain(scalars.keys()) {
        if !m.params.iter().any(|p| &p.name == k) {
            return Err(Error::Argument(format!("{}: no parameter {k:?}; parameters: {}", m.kernel, known.join(", "))));
        }
    }
    let mut out = Vec::with_capacity(m.params.len() + 2);
    for p in &m.params {
        match &p.kind {
            Kind::Pointer { role: Role::Unused, .. } => {
                if pointers.contains_key(&p.name) {
                    return Err(Error::Argument(format!(
                        "{}: {} is unused in this export; give no buffer",
                        m.kernel, p.name
                    )));
                }
                out.push(ParamValue::from_u64(0));
            }
            Kind::Pointer { align, .. } => {
                let addr = *pointers
                    .get(&p.name)
                    .ok_or_else(|| Error::Argument(format!("{}: no buffer for pointer {}", m.kernel, p.name)))?;
                if addr % align != 0 {
                    return Err(Error::Argument(format!(
                        "{}: {} at {addr:#x} is not {align}-byte aligned",
                        m.kernel, p.name
                    )));
                }
                out.push(ParamValue::from_u64(addr));
            }
            Kind::Scalar { ty, value } => {
                if pointers.contains_key(&p.name) {
                    return Err(Error::Argument(format!("{}: {} is a scalar, not a buffer", m.kernel, p.name)));
                }
                let computed = plan.scalars.iter().find(|(n, _)| *n == p.name).map(|(_, v)| *v);
                let given = scalars.get(&p.name).copied();
                let v = match (value, computed, given) {
                    (Some(expr), _, Some(_)) => {
                        return Err(Error::Argument(format!(
                            "{}: {} is computed from the sizes ({expr}); do not pass it",
                            m.kernel, p.name
                        )))
                    }
                    (_, Some(c), None) => c as f64,
                    (None, _, Some(g)) => g,
                    _ => {
                        return Err(Error::Argument(format!(
                            "{}: scalar {} ({}) needs a value: --scalar {}=...",
                            m.kernel, p.name, p.ty, p.name
                        )))
                    }
                };
                out.push(scalar_param(&m.kernel, &p.name, *ty, v)?);
            }
        }
    }
    out.push(ParamValue::from_u64(scratch[0]));
    out.push(ParamValue::from_u64(scratch[1]));
    Ok(out)
}

fn scalar_param(kernel: &str, name: &str, ty: Scalar, v: f64) -> Result<ParamValue> {
    if !v.is_finite() {
        return Err(Error::Argument(format!("{kernel}: {name} = {v} is not finite")));
    }
    if !ty.is_float() {
        if v.fract() != 0.0 {
            return Err(Error::Argument(format!("{kernel}: {name} is {ty:?}, an integer; got {v}")));
        }
        check_int(kernel, name, ty, v as i128)?;
    }
    Ok(match ty {
        Scalar::I32 => ParamValue::from_u32(v as i32 as u32),
        Scalar::U32 => ParamValue::from_u32(v as u32),
        Scalar::I64 => ParamValue::from_u64(v as i64 as u64),
        Scalar::U64 => ParamValue::from_u64(v as u64),
        Scalar::F32 => ParamValue::from_u32((v as f32).to_bits()),
        Scalar::F64 => ParamValue::from_u64(v.to_bits()),
    })
}

/// The bytes of the manifest's `image` ("ptx", "cubin"; `None`: the preferred one), checked against the SHA-256
/// the manifest records, so that a re-exported image with a stale manifest (or the reverse) is refused.
pub fn read_image(m: &Manifest, image: Option<&str>) -> Result<(String, Vec<u8>)> {
    let (kind, path) = m.image(image)?;
    let bytes =
        std::fs::read(&path).map_err(|e| Error::Io(format!("cannot read the {kind} image {}: {e}", path.display())))?;
    if let Some((_, want)) = m.sha256.iter().find(|(k, _)| *k == kind) {
        let got = crate::sha256::hex_digest(&bytes);
        if &got != want {
            return Err(Error::Manifest(format!(
                "{} does not match its manifest {} (sha256 {got}, manifest says {want}): export again",
                path.display(),
                m.path.display()
            )));
        }
    }
    Ok((kind, bytes))
}

/// A loaded export: its module and function, ready to launch from a [`Plan`].
pub struct Exported {
    pub manifest: Manifest,
    pub image: String,
    pub module: Arc<CudaModule>,
    pub function: CudaFunction,
}

impl Exported {
    /// Load the manifest's `image` ("ptx" or "cubin"; `None`: the preferred one) into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>, manifest: Manifest, image: Option<&str>) -> Result<Exported> {
        let (kind, bytes) = read_image(&manifest, image)?;
        Exported::from_image(ctx, manifest, kind, bytes)
    }

    /// Load image bytes already read (and checked) with [`read_image`].
    pub fn from_image(ctx: &Arc<CudaContext>, manifest: Manifest, kind: String, bytes: Vec<u8>) -> Result<Exported> {
        let img = match kind.as_str() {
            "ptx" => Image::from(Ptx::from_src(
                String::from_utf8(bytes).map_err(|_| Error::Manifest("the PTX image is not UTF-8 text".into()))?,
            )),
            "cubin" => Image::Cubin(bytes),
            other => return Err(Error::Manifest(format!("unknown image kind {other:?}"))),
        };
        let module = ctx.load_module(img)?;
        let function = module.load_function(&manifest.entry)?;
        if manifest.shared_bytes > 48 * 1024 {
            function.set_max_dynamic_shared(manifest.shared_bytes)?;
        }
        Ok(Exported { manifest, image: kind, module, function })
    }

    pub fn config(&self, plan: &Plan) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (plan.grid[0], plan.grid[1], plan.grid[2]),
            block_dim: (plan.block, 1, 1),
            shared_mem_bytes: plan.shared,
        }
    }

    /// Launch with packed parameters on `stream` (asynchronous).
    ///
    /// # Safety
    /// `params` must come from [`pack`] for this manifest, with buffers at least as large as the plan says.
    pub unsafe fn launch(&self, stream: &CudaStream, plan: &Plan, params: &mut [ParamValue]) -> Result<()> {
        let mut b = stream.launch_builder(&self.function);
        for p in params.iter() {
            b.arg(p);
        }
        b.launch(self.config(plan))
    }
}

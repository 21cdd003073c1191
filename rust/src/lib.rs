//! Launch Triton kernels exported by `python -m kernels.export` (PTX or cubin plus a JSON manifest) through
//! the CUDA driver API, with no dependencies: `libcuda.so.1` is opened at run time.
//!
//! ```no_run
//! use workbook_launch::{CudaContext, LaunchConfig, Ptx, DevicePtr};
//! let ctx = CudaContext::new(0)?;
//! let stream = ctx.default_stream();
//! let module = ctx.load_module(Ptx::from_file("vector_add.ptx")?)?;
//! let f = module.load_function("_naive_vector_add_kernel")?;
//! let x = stream.memcpy_stod(&[1.0f32; 1000])?;
//! let y = stream.memcpy_stod(&[2.0f32; 1000])?;
//! let out = stream.alloc_zeros::<f32>(1000)?;
//! let cfg = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
//! let mut b = stream.launch_builder(&f);
//! b.arg(&x).arg(&y).arg(&out).arg(&1000i32).arg(&DevicePtr(0)).arg(&DevicePtr(0));
//! unsafe { b.launch(cfg)? };
//! let host: Vec<f32> = stream.memcpy_dtov(&out)?;
//! # Ok::<(), workbook_launch::Error>(())
//! ```

pub mod cli;
pub mod cuda;
pub mod driver;
pub mod error;
pub mod exported;
pub mod expr;
pub mod json;
pub mod manifest;
pub mod sha256;

pub use cuda::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, Image, KernelArg, LaunchArgs,
    LaunchConfig, ParamValue, Ptx,
};
pub use error::{Error, Result};
pub use exported::{pack, read_image, Exported};
pub use manifest::{Manifest, Plan};

//! A safe layer over the driver with cudarc 0.19's names: `CudaContext::new(0)`, `ctx.load_module(ptx)`,
//! `module.load_function(name)`, `stream.memcpy_stod` / `memcpy_dtov`, `stream.launch_builder(&f).arg(&a)
//! .launch(cfg)`. Switching to cudarc later is a change of imports for code written against it.

use std::ffi::{c_char, c_int, c_void, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use crate::driver::{self, check, CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule, CUstream, Driver};
use crate::error::{Error, Result};

/// The primary context of one device (the one torch and Triton use too).
#[derive(Debug)]
pub struct CudaContext {
    ordinal: usize,
    device: CUdevice,
    ctx: CUcontext,
}

// SAFETY: a primary context may be used from any thread once made current there.
unsafe impl Send for CudaContext {}
unsafe impl Sync for CudaContext {}

fn d() -> Result<&'static Driver> {
    driver::get()
}

impl CudaContext {
    pub fn new(ordinal: usize) -> Result<Arc<CudaContext>> {
        let drv = d()?;
        let mut count: c_int = 0;
        check(drv, unsafe { (drv.cuDeviceGetCount)(&mut count) }, "cuDeviceGetCount")?;
        if ordinal >= count as usize {
            return Err(Error::Argument(format!("no CUDA device {ordinal}: this machine has {count}")));
        }
        let mut device: CUdevice = 0;
        check(drv, unsafe { (drv.cuDeviceGet)(&mut device, ordinal as c_int) }, "cuDeviceGet")?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        check(drv, unsafe { (drv.cuDevicePrimaryCtxRetain)(&mut ctx, device) }, "cuDevicePrimaryCtxRetain")?;
        let c = Arc::new(CudaContext { ordinal, device, ctx });
        c.bind_to_thread()?;
        Ok(c)
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Make this context current on the calling thread.
    pub fn bind_to_thread(&self) -> Result<()> {
        let drv = d()?;
        check(drv, unsafe { (drv.cuCtxSetCurrent)(self.ctx) }, "cuCtxSetCurrent")
    }

    pub fn name(&self) -> Result<String> {
        let drv = d()?;
        let mut buf = [0 as c_char; 256];
        check(drv, unsafe { (drv.cuDeviceGetName)(buf.as_mut_ptr(), 256, self.device) }, "cuDeviceGetName")?;
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    pub fn attribute(&self, attr: c_int) -> Result<i32> {
        let drv = d()?;
        let mut v: c_int = 0;
        check(drv, unsafe { (drv.cuDeviceGetAttribute)(&mut v, attr, self.device) }, "cuDeviceGetAttribute")?;
        Ok(v)
    }

    pub fn compute_capability(&self) -> Result<(i32, i32)> {
        Ok((
            self.attribute(driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            self.attribute(driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ))
    }

    /// The driver's CUDA version as `(major, minor)`, e.g. `(13, 0)`.
    pub fn driver_version() -> Result<(i32, i32)> {
        let drv = d()?;
        let mut v: c_int = 0;
        check(drv, unsafe { (drv.cuDriverGetVersion)(&mut v) }, "cuDriverGetVersion")?;
        Ok((v / 1000, (v % 1000) / 10))
    }

    /// The legacy default (NULL) stream.
    pub fn default_stream(self: &Arc<Self>) -> Arc<CudaStream> {
        Arc::new(CudaStream { ctx: self.clone(), stream: std::ptr::null_mut() })
    }

    /// A new stream that does not synchronise with the NULL stream.
    pub fn new_stream(self: &Arc<Self>) -> Result<Arc<CudaStream>> {
        let drv = d()?;
        self.bind_to_thread()?;
        let mut s: CUstream = std::ptr::null_mut();
        check(drv, unsafe { (drv.cuStreamCreate)(&mut s, driver::CU_STREAM_NON_BLOCKING) }, "cuStreamCreate")?;
        Ok(Arc::new(CudaStream { ctx: self.clone(), stream: s }))
    }

    pub fn synchronize(&self) -> Result<()> {
        let drv = d()?;
        self.bind_to_thread()?;
        check(drv, unsafe { (drv.cuCtxSynchronize)() }, "cuCtxSynchronize")
    }

    /// Load PTX (JIT-compiled by the driver; its log is in the error) or a cubin.
    pub fn load_module(self: &Arc<Self>, image: impl Into<Image>) -> Result<Arc<CudaModule>> {
        let drv = d()?;
        self.bind_to_thread()?;
        let image = image.into();
        let (bytes, what) = match &image {
            Image::Ptx(src) => {
                let mut b = src.clone().into_bytes();
                b.push(0);
                (b, "PTX")
            }
            Image::Cubin(b) => (b.clone(), "cubin"),
        };
        let mut log = vec![0u8; 8192];
        let mut opts = [driver::CU_JIT_ERROR_LOG_BUFFER, driver::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut vals = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
        let mut module: CUmodule = std::ptr::null_mut();
        let code = unsafe {
            (drv.cuModuleLoadDataEx)(
                &mut module,
                bytes.as_ptr() as *const c_void,
                2,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if let Err(mut e) = check(drv, code, &format!("cuModuleLoadDataEx({what})")) {
            let text = String::from_utf8_lossy(&log[..log.iter().position(|&c| c == 0).unwrap_or(0)]).into_owned();
            if let Error::Driver { description, .. } = &mut e {
                if !text.trim().is_empty() {
                    description.push_str(&format!("; JIT log: {}", text.trim()));
                }
            }
            return Err(e);
        }
        Ok(Arc::new(CudaModule { ctx: self.clone(), module }))
    }
}

impl Drop for CudaContext {
    fn drop(&mut self) {
        if let Ok(drv) = d() {
            unsafe { (drv.cuDevicePrimaryCtxRelease)(self.device) };
        }
    }
}

/// PTX source text.
#[derive(Debug, Clone)]
pub struct Ptx(String);

impl Ptx {
    pub fn from_src(src: impl Into<String>) -> Ptx {
        Ptx(src.into())
    }

    pub fn from_file(path: impl AsRef<Path>) -> Result<Ptx> {
        let p = path.as_ref();
        std::fs::read_to_string(p).map(Ptx).map_err(|e| Error::Io(format!("cannot read PTX {}: {e}", p.display())))
    }
}

/// A module image: PTX text or a cubin.
#[derive(Debug, Clone)]
pub enum Image {
    Ptx(String),
    Cubin(Vec<u8>),
}

impl From<Ptx> for Image {
    fn from(p: Ptx) -> Image {
        Image::Ptx(p.0)
    }
}

#[derive(Debug)]
pub struct CudaModule {
    ctx: Arc<CudaContext>,
    module: CUmodule,
}

unsafe impl Send for CudaModule {}
unsafe impl Sync for CudaModule {}

impl CudaModule {
    pub fn load_function(self: &Arc<Self>, name: &str) -> Result<CudaFunction> {
        let drv = d()?;
        let cname = CString::new(name).map_err(|_| Error::Argument(format!("bad kernel name {name:?}")))?;
        let mut f: CUfunction = std::ptr::null_mut();
        check(
            drv,
            unsafe { (drv.cuModuleGetFunction)(&mut f, self.module, cname.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        Ok(CudaFunction { module: self.clone(), f, name: name.to_string() })
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if let Ok(drv) = d() {
            let _ = self.ctx.bind_to_thread();
            unsafe { (drv.cuModuleUnload)(self.module) };
        }
    }
}

#[derive(Debug, Clone)]
pub struct CudaFunction {
    module: Arc<CudaModule>,
    f: CUfunction,
    name: String,
}

unsafe impl Send for CudaFunction {}
unsafe impl Sync for CudaFunction {}

impl CudaFunction {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn attribute(&self, attr: c_int) -> Result<i32> {
        let drv = d()?;
        let mut v: c_int = 0;
        check(drv, unsafe { (drv.cuFuncGetAttribute)(&mut v, attr, self.f) }, "cuFuncGetAttribute")?;
        Ok(v)
    }

    /// Allow `bytes` of dynamic shared memory (needed above 48 KiB), checked against the device's opt-in limit.
    pub fn set_max_dynamic_shared(&self, bytes: u32) -> Result<()> {
        let drv = d()?;
        let limit = self.module.ctx.attribute(driver::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        if bytes as i64 > limit as i64 {
            return Err(Error::Argument(format!(
                "{} needs {bytes} B of dynamic shared memory; this device allows {limit} B per block",
                self.name
            )));
        }
        check(
            drv,
            unsafe {
                (drv.cuFuncSetAttribute)(
                    self.f,
                    driver::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as c_int,
                )
            },
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
        )
    }
}

#[derive(Debug)]
pub struct CudaStream {
    ctx: Arc<CudaContext>,
    stream: CUstream,
}

unsafe impl Send for CudaStream {}
unsafe impl Sync for CudaStream {}

/// Types that may be copied to and from the device as plain bytes.
///
/// # Safety
/// Every bit pattern of the type's size must be a valid value, and the type must have no padding.
pub unsafe trait DeviceRepr: Copy + Default {}
unsafe impl DeviceRepr for u8 {}
unsafe impl DeviceRepr for i8 {}
unsafe impl DeviceRepr for u16 {}
unsafe impl DeviceRepr for i16 {}
unsafe impl DeviceRepr for u32 {}
unsafe impl DeviceRepr for i32 {}
unsafe impl DeviceRepr for u64 {}
unsafe impl DeviceRepr for i64 {}
unsafe impl DeviceRepr for f32 {}
unsafe impl DeviceRepr for f64 {}

/// Device memory for `len` values of `T`, freed on drop.
#[derive(Debug)]
pub struct CudaSlice<T> {
    ptr: CUdeviceptr,
    len: usize,
    stream: Arc<CudaStream>,
    _t: PhantomData<T>,
}

unsafe impl<T> Send for CudaSlice<T> {}
unsafe impl<T> Sync for CudaSlice<T> {}

impl<T> CudaSlice<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The raw device address (0 for an empty slice).
    pub fn device_ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl<T> Drop for CudaSlice<T> {
    fn drop(&mut self) {
        if self.ptr != 0 {
            if let Ok(drv) = d() {
                let _ = self.stream.synchronize();
                unsafe { (drv.cuMemFree)(self.ptr) };
            }
        }
    }
}

impl CudaStream {
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    pub fn raw(&self) -> CUstream {
        self.stream
    }

    pub fn synchronize(&self) -> Result<()> {
        let drv = d()?;
        check(drv, unsafe { (drv.cuStreamSynchronize)(self.stream) }, "cuStreamSynchronize")
    }

    /// Uninitialised device memory for `len` values (use [`CudaStream::memset_bytes`] or a copy before reading).
    pub fn alloc<T: DeviceRepr>(self: &Arc<Self>, len: usize) -> Result<CudaSlice<T>> {
        let drv = d()?;
        self.ctx.bind_to_thread()?;
        let bytes =
            len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| Error::Argument("allocation too large".into()))?;
        let mut ptr: CUdeviceptr = 0;
        if bytes > 0 {
            check(drv, unsafe { (drv.cuMemAlloc)(&mut ptr, bytes) }, &format!("cuMemAlloc({bytes} bytes)"))?;
        }
        Ok(CudaSlice { ptr, len, stream: self.clone(), _t: PhantomData })
    }

    pub fn alloc_zeros<T: DeviceRepr>(self: &Arc<Self>, len: usize) -> Result<CudaSlice<T>> {
        let mut s = self.alloc::<T>(len)?;
        self.memset_bytes(&mut s, 0)?;
        Ok(s)
    }

    /// Fill every byte of `dst` with `value` (0xFF makes every float NaN: an unwritten output shows).
    pub fn memset_bytes<T>(&self, dst: &mut CudaSlice<T>, value: u8) -> Result<()> {
        let drv = d()?;
        if dst.num_bytes() == 0 {
            return Ok(());
        }
        check(drv, unsafe { (drv.cuMemsetD8Async)(dst.ptr, value, dst.num_bytes(), self.stream) }, "cuMemsetD8Async")
    }

    pub fn memcpy_htod<T: DeviceRepr>(&self, src: &[T], dst: &mut CudaSlice<T>) -> Result<()> {
        let drv = d()?;
        if src.len() != dst.len {
            return Err(Error::Argument(format!("copy of {} values into a device buffer of {}", src.len(), dst.len)));
        }
        if dst.num_bytes() == 0 {
            return Ok(());
        }
        check(
            drv,
            unsafe { (drv.cuMemcpyHtoDAsync)(dst.ptr, src.as_ptr() as *const c_void, dst.num_bytes(), self.stream) },
            "cuMemcpyHtoDAsync",
        )?;
        self.synchronize()
    }

    /// Copy a host slice to new device memory (synchronous with respect to the host slice).
    pub fn memcpy_stod<T: DeviceRepr>(self: &Arc<Self>, src: &[T]) -> Result<CudaSlice<T>> {
        let mut dst = self.alloc::<T>(src.len())?;
        self.memcpy_htod(src, &mut dst)?;
        Ok(dst)
    }

    /// Copy device memory back to a new vector (waits for the stream).
    pub fn memcpy_dtov<T: DeviceRepr>(&self, src: &CudaSlice<T>) -> Result<Vec<T>> {
        let drv = d()?;
        let mut out = vec![T::default(); src.len];
        if src.num_bytes() > 0 {
            check(
                drv,
                unsafe {
                    (drv.cuMemcpyDtoHAsync)(out.as_mut_ptr() as *mut c_void, src.ptr, src.num_bytes(), self.stream)
                },
                "cuMemcpyDtoHAsync",
            )?;
        }
        self.synchronize()?;
        Ok(out)
    }

    /// cudarc 0.19's name for [`CudaStream::memcpy_stod`].
    pub fn clone_htod<T: DeviceRepr>(self: &Arc<Self>, src: &[T]) -> Result<CudaSlice<T>> {
        self.memcpy_stod(src)
    }

    /// cudarc 0.19's name for [`CudaStream::memcpy_dtov`].
    pub fn clone_dtoh<T: DeviceRepr>(&self, src: &CudaSlice<T>) -> Result<Vec<T>> {
        self.memcpy_dtov(src)
    }

    pub fn launch_builder<'a>(&'a self, f: &'a CudaFunction) -> LaunchArgs<'a> {
        LaunchArgs { stream: self, f, args: Vec::new() }
    }
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if !self.stream.is_null() {
            if let Ok(drv) = d() {
                unsafe { (drv.cuStreamDestroy)(self.stream) };
            }
        }
    }
}

/// One kernel parameter's bytes, in an 8-byte-aligned slot (every Triton parameter is 4 or 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, align(8))]
pub struct ParamValue {
    pub bytes: [u8; 8],
    pub len: u8,
}

impl ParamValue {
    pub fn from_u64(v: u64) -> ParamValue {
        ParamValue { bytes: v.to_le_bytes(), len: 8 }
    }

    pub fn from_u32(v: u32) -> ParamValue {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&v.to_le_bytes());
        ParamValue { bytes, len: 4 }
    }
}

/// Something passed to a kernel by value: scalars, device pointers, device slices (their address).
pub trait KernelArg {
    fn param(&self) -> ParamValue;
}

macro_rules! scalar_arg {
    ($($t:ty => $conv:expr),*) => {$(
        impl KernelArg for $t {
            fn param(&self) -> ParamValue {
                #[allow(clippy::redundant_closure_call)]
                ($conv)(*self)
            }
        }
    )*};
}

scalar_arg! {
    i32 => |v: i32| ParamValue::from_u32(v as u32),
    u32 => ParamValue::from_u32,
    f32 => |v: f32| ParamValue::from_u32(v.to_bits()),
    i64 => |v: i64| ParamValue::from_u64(v as u64),
    u64 => ParamValue::from_u64,
    f64 => |v: f64| ParamValue::from_u64(v.to_bits())
}

impl<T> KernelArg for CudaSlice<T> {
    fn param(&self) -> ParamValue {
        ParamValue::from_u64(self.ptr)
    }
}

impl KernelArg for ParamValue {
    fn param(&self) -> ParamValue {
        *self
    }
}

/// A device address passed as is (NULL for Triton's unused scratch pointers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr(pub u64);

impl KernelArg for DevicePtr {
    fn param(&self) -> ParamValue {
        ParamValue::from_u64(self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid_dim: (u32, u32, u32),
    pub block_dim: (u32, u32, u32),
    pub shared_mem_bytes: u32,
}

pub struct LaunchArgs<'a> {
    stream: &'a CudaStream,
    f: &'a CudaFunction,
    args: Vec<ParamValue>,
}

impl LaunchArgs<'_> {
    pub fn arg<A: KernelArg + ?Sized>(&mut self, a: &A) -> &mut Self {
        self.args.push(a.param());
        self
    }

    pub fn args(&self) -> &[ParamValue] {
        &self.args
    }

    /// Launch on the builder's stream (asynchronous).
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and every pointer must be
    /// valid for what the kernel reads and writes: the driver cannot check either.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<()> {
        launch_raw(self.stream, self.f, &mut self.args, cfg)
    }
}

/// Launch `f` with already packed parameters (the benchmark's inner loop).
///
/// # Safety
/// As for [`LaunchArgs::launch`].
pub unsafe fn launch_raw(
    stream: &CudaStream,
    f: &CudaFunction,
    args: &mut [ParamValue],
    cfg: LaunchConfig,
) -> Result<()> {
    let drv = d()?;
    let mut ptrs: Vec<*mut c_void> = args.iter_mut().map(|a| a.bytes.as_mut_ptr() as *mut c_void).collect();
    let (g, b) = (cfg.grid_dim, cfg.block_dim);
    check(
        drv,
        (drv.cuLaunchKernel)(
            f.f,
            g.0,
            g.1,
            g.2,
            b.0,
            b.1,
            b.2,
            cfg.shared_mem_bytes,
            stream.stream,
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        ),
        &format!("cuLaunchKernel({})", f.name),
    )
}

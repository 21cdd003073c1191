//! The CUDA driver API, bound at run time: `dlopen("libcuda.so.1")` and `dlsym` for each entry point, so the
//! crate builds and its tests run on machines without CUDA. Only the calls this crate uses are bound.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::error::{Error, Result};

pub type CUresult = c_int;
pub type CUdevice = c_int;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUdeviceptr = u64;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: c_int = 0;
pub const CU_FUNC_ATTRIBUTE_NUM_REGS: c_int = 4;
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
pub const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
pub const CU_JIT_ERROR_LOG_BUFFER: c_int = 5;
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;

const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

/// The library this crate loads: `$WORKBOOK_LIBCUDA` if set, else `libcuda.so.1`.
pub fn library_name() -> String {
    std::env::var("WORKBOOK_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".to_string())
}

macro_rules! driver_api {
    ($( $field:ident = $sym:literal : fn($($arg:ty),*) ; )*) => {
        /// Entry points of the CUDA driver, resolved once.
        #[allow(non_snake_case)]
        pub struct Driver {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
        }

        impl Driver {
            fn open(name: &str) -> Result<Driver> {
                let cname = CString::new(name).map_err(|_| Error::Library(format!("bad library name {name:?}")))?;
                // SAFETY: dlopen with a valid C string; a null result is handled below.
                let handle = unsafe { dlopen(cname.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
                if handle.is_null() {
                    return Err(Error::Library(format!(
                        "cannot load {name}: {} (is the NVIDIA driver installed? this machine may have no GPU; \
                         set WORKBOOK_LIBCUDA to the library's path)",
                        last_dl_error()
                    )));
                }
                Ok(Driver {
                    $( $field: {
                        let sym = CString::new($sym).expect("symbol names have no NUL");
                        // SAFETY: dlsym on a live handle; the symbol's C signature is the one declared above.
                        let p = unsafe { dlsym(handle, sym.as_ptr()) };
                        if p.is_null() {
                            return Err(Error::Library(format!(
                                "{name} has no {} (driver too old?): {}", $sym, last_dl_error()
                            )));
                        }
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(p) }
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    cuInit = "cuInit": fn(c_uint);
    cuDriverGetVersion = "cuDriverGetVersion": fn(*mut c_int);
    cuDeviceGetCount = "cuDeviceGetCount": fn(*mut c_int);
    cuDeviceGet = "cuDeviceGet": fn(*mut CUdevice, c_int);
    cuDeviceGetName = "cuDeviceGetName": fn(*mut c_char, c_int, CUdevice);
    cuDeviceGetAttribute = "cuDeviceGetAttribute": fn(*mut c_int, c_int, CUdevice);
    cuDevicePrimaryCtxRetain = "cuDevicePrimaryCtxRetain": fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease = "cuDevicePrimaryCtxRelease_v2": fn(CUdevice);
    cuCtxSetCurrent = "cuCtxSetCurrent": fn(CUcontext);
    cuCtxSynchronize = "cuCtxSynchronize": fn();
    cuModuleLoadDataEx = "cuModuleLoadDataEx": fn(*mut CUmodule, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
    cuModuleUnload = "cuModuleUnload": fn(CUmodule);
    cuModuleGetFunction = "cuModuleGetFunction": fn(*mut CUfunction, CUmodule, *const c_char);
    cuFuncGetAttribute = "cuFuncGetAttribute": fn(*mut c_int, c_int, CUfunction);
    cuFuncSetAttribute = "cuFuncSetAttribute": fn(CUfunction, c_int, c_int);
    cuMemAlloc = "cuMemAlloc_v2": fn(*mut CUdeviceptr, usize);
    cuMemFree = "cuMemFree_v2": fn(CUdeviceptr);
    cuMemsetD8Async = "cuMemsetD8Async": fn(CUdeviceptr, u8, usize, CUstream);
    cuMemcpyHtoDAsync = "cuMemcpyHtoDAsync_v2": fn(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync = "cuMemcpyDtoHAsync_v2": fn(*mut c_void, CUdeviceptr, usize, CUstream);
    cuStreamCreate = "cuStreamCreate": fn(*mut CUstream, c_uint);
    cuStreamDestroy = "cuStreamDestroy_v2": fn(CUstream);
    cuStreamSynchronize = "cuStreamSynchronize": fn(CUstream);
    cuLaunchKernel = "cuLaunchKernel": fn(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void);
    cuGetErrorName = "cuGetErrorName": fn(CUresult, *mut *const c_char);
    cuGetErrorString = "cuGetErrorString": fn(CUresult, *mut *const c_char);
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by libc.
    let e = unsafe { dlerror() };
    if e.is_null() {
        "unknown error".to_string()
    } else {
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

static DRIVER: OnceLock<std::result::Result<Driver, Error>> = OnceLock::new();

/// The process-wide driver, loaded and `cuInit`-ed on first use.
pub fn get() -> Result<&'static Driver> {
    let d = DRIVER.get_or_init(|| {
        let d = Driver::open(&library_name())?;
        // SAFETY: cuInit takes flags 0.
        check(&d, unsafe { (d.cuInit)(0) }, "cuInit")?;
        Ok(d)
    });
    d.as_ref().map_err(Clone::clone)
}

/// Turn a driver result into `Ok(())` or an error with the driver's name and description of the code.
pub fn check(d: &Driver, code: CUresult, call: &str) -> Result<()> {
    if code == CUDA_SUCCESS {
        return Ok(());
    }
    let text = |f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: the driver writes a pointer to a static string, or leaves it null for an unknown code.
        if unsafe { f(code, &mut p) } == CUDA_SUCCESS && !p.is_null() {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            "unknown error code".to_string()
        }
    };
    Err(Error::Driver {
        call: call.to_string(),
        code,
        name: text(d.cuGetErrorName),
        description: text(d.cuGetErrorString),
    })
}

"""Lesson 05's zoo: the launch predicted from compiled metadata, the manifest-driven launch, the launch grid in
Rust (graded only where cargo is installed)."""

from . import Entry, edit, editor, solution, solution_value

__all__ = ["ENTRIES"]

PREDICT = solution("05_ptx_export_rust", "predict_launch")
_predict = editor("05_ptx_export_rust.predict_launch", PREDICT)

PREDICT_LAUNCH = [
    _predict("swapped-grid", 'grid = (triton.cdiv(sizes["V"], constexprs["BV"]), sizes["B"] * sizes["H"], 1)',
             'grid = (sizes["B"] * sizes["H"], triton.cdiv(sizes["V"], constexprs["BV"]), 1)', fault="grid",
             why="heads along x, V blocks along y"),
    _predict("floor-blocks", 'triton.cdiv(sizes["V"], constexprs["BV"])', 'sizes["V"] // constexprs["BV"]',
             fault="grid", why="floor division drops the last V block"),
    _predict("warps-as-threads", "metadata.num_warps * metadata.warp_size", "metadata.num_warps", fault="block",
             why="num_warps threads, not 32 per warp"),
    _predict("time-in-grid", 'sizes["B"] * sizes["H"], 1)', 'sizes["B"] * sizes["H"], triton.cdiv(sizes["T"], '
             'constexprs["BT"]))', fault="grid", why="a grid axis over chunks, which the fused kernel walks itself"),
    _predict("math-ceil", 'triton.cdiv(sizes["V"], constexprs["BV"])', 'math.ceil(sizes["V"] / constexprs["BV"])',
             wrong=False, why="math.ceil for the V blocks"),
    _predict("solution", wrong=False, why="the lesson's prediction"),
    _predict("named-fields", "    grid = (", "    threads = metadata.num_warps * metadata.warp_size\n    grid = (",
             "(metadata.num_warps * metadata.warp_size, 1, 1)", "(threads, 1, 1)", wrong=False,
             why="the thread count named first"),
]

#: The lesson's ``evaluate`` cell and constants: what the build_launch cell sees in the notebook.
PRELUDE = solution("05_ptx_export_rust", "ast", "operator", "_OPS", "_FUNCS", "evaluate", "TORCH_DTYPES", "INT_RANGE")

BUILD = solution("05_ptx_export_rust", "build_launch")


def _build(name, *pairs, **kw):
    return Entry("05_ptx_export_rust.build_launch", name, PRELUDE + edit(BUILD, *pairs), **kw)


BUILD_LAUNCH = [
    _build("requirement-asserted", "            raise ValueError(f\"requirement {cond!r} fails for sizes {sizes}\")",
           "            raise AssertionError(cond)", fault="raised AssertionError",
           why="asserts the requirement instead of raising ValueError"),
    _build("numel-exact", "            if t.numel() < need:", "            if t.numel() != need:",
           fault="a larger buffer is fine", why="refuses a tensor larger than the launch needs"),
    _build("no-int-range", "            if not lo <= int(value) <= hi:\n"
           "                raise ValueError(f\"{name} = {value} does not fit {p['type']}\")\n", "",
           fault="accepted", why="passes an integer scalar on without checking that it fits its type"),
    _build("no-grid-limits", "        if not 1 <= g <= limit:", "        if g < 1:", fault="accepted",
           why="checks only that each grid dimension is positive"),
    _build("exclusive-grid-limit", "        if not 1 <= g <= limit:", "        if not 1 <= g < limit:",
           fault="inclusive", why="refuses a grid of exactly 65535 along y, which CUDA allows"),
    _build("unused-pointer-looked-up", '''            if p["role"] == "unused":
                args.append(("u64", 0))
                continue
''', "", fault="unused|lut_ptr|ptr", why="asks for a tensor for every pointer, the unused ones too"),
    _build("no-scratch-pointers", '''        args.append(("u64", alloc(nbytes, s["align"]) if nbytes else 0))''',
           "        pass",
           fault="arguments", why="forgets the two trailing scratch pointers"),
    _build("scratch-per-program", 'alloc(nbytes, s["align"])', 'alloc(s["bytes_per_program"], s["align"])',
           fault="alloc", why="allocates one program's scratch for the whole grid"),
    _build("ints-as-floats", '            args.append((p["type"], int(value)))', '            args.append((p["type"], '
           'float(value)))', fault="expected", why="passes integer scalars as floats"),
    _build("no-requires", "            raise ValueError(f\"requirement {cond!r} fails for sizes {sizes}\")",
           "            pass", fault="accepted", why="never checks the manifest's requires"),
    _build("no-dtype-check", "                raise TypeError(f\"{name} has dtype {t.dtype}; the kernel was compiled "
           "for {p['dtype']}\")", "                pass", fault="accepted", why="launches a tensor of any dtype"),
    _build("warps-as-block", '"block": (manifest["threads_per_block"], 1, 1)', '"block": (manifest["num_warps"], 1, '
           '1)', fault="block", why="num_warps threads per block"),
    _build("sizes-only-env", "    env = {k: v for k, v in manifest[\"constexprs\"].items() if isinstance(v, int) and "
           "not isinstance(v, bool)}\n    env.update(sizes)\n", "    env = dict(sizes)\n",
           fault="refused a launch that fits", why="evaluates the grid without the constexprs: its own ValueError "
                                                   "on every launch"),
    _build("pointers-in-dict-order", '''    args = []
    for p in manifest["params"]:''', '''    args = [("u64", t.data_ptr()) for t in tensors.values()]
    for p in manifest["params"]:''', "            args.append((\"u64\", t.data_ptr()))\n", "",
           fault="args[", why="takes the pointers in the tensors dict's order, not the manifest's"),
    _build("pointers-first", "            args.append((\"u64\", t.data_ptr()))\n",
           "            pointers.append((\"u64\", t.data_ptr()))\n", "    args = []\n", "    args, pointers = [], []\n",
           "    programs = grid[0] * grid[1] * grid[2]\n",
           "    args = pointers + args\n    programs = grid[0] * grid[1] * grid[2]\n",
           fault="args[", why="every pointer first, then the scalars, whatever the manifest's order"),
    _build("scratch-from-grid-x", "    programs = grid[0] * grid[1] * grid[2]\n", "    programs = grid[0]\n",
           fault="alloc", why="counts the programs along x only"),
    _build("i32-range-exclusive", "if not lo <= int(value) <= hi:", "if not lo <= int(value) < hi:",
           fault="both ends included", why="refuses 2**31 - 1, the largest i32"),
    _build("align-in-elements", 'if t.data_ptr() % p["align"]:', 'if (t.data_ptr() // t.element_size()) % p["align"]:',
           fault="align is in bytes", why="counts the address in elements: refuses a view 16 bytes in"),
    _build("scratch-align-16", 'alloc(nbytes, s["align"])', 'alloc(nbytes, 16)', fault="align",
           why="asks for 16-byte scratch whatever the manifest's align"),
    _build("solution", wrong=False, why="the lesson's launch"),
    _build("no-alignment-check", '            if t.data_ptr() % p["align"]:\n'
           '                raise ValueError(f"{name} starts at an address that is not a multiple of {p[\'align\']} '
           'bytes (a view "\n'
           '                                 "such as x[1:]); the kernel was compiled assuming it is")\n',
           "", fault="accepted",
           why="launches a tensor that starts off the 16 bytes the kernel was compiled to assume"),
    _build("refuses-misaligned", '            if t.data_ptr() % p["align"]:',
           '            if t.data_ptr() & (p["align"] - 1):', wrong=False,
           why="the alignment test as a bit mask (align is a power of two)"),
    _build("refuses-strided", '            args.append(("u64", t.data_ptr()))',
           '            if not t.is_contiguous():\n'
           '                raise ValueError(f"{name} must be contiguous")\n'
           '            args.append(("u64", t.data_ptr()))', wrong=False,
           why="extra validation: contiguous tensors only"),
]


#: The Rust exercise's answer: the lesson's solution, without the nbgrader markers.
GRID = solution_value("05_ptx_export_rust", "YOUR_RUST")

_EVAL = "        let v = evaluate(&manifest.grid[axis], &env).map_err(|e| e.0)?;\n"
_CHECK = """        if v < 1 || v > limits[axis] {
            return Err(format!("grid axis {axis} = {v} is outside 1..{}", limits[axis]));
        }
        grid[axis] = v as u32;
"""
_OWN_CDIV = """        let text = manifest.grid[axis].trim();
        let v = match text.strip_prefix("cdiv(").and_then(|t| t.strip_suffix(')')) {
            Some(inner) => {
                let (a, b) = inner.split_once(',').ok_or(format!("cannot read {text}"))?;
                let a = evaluate(a.trim(), &env).map_err(|e| e.0)?;
                let b = evaluate(b.trim(), &env).map_err(|e| e.0)?;
                if b <= 0 {
                    return Err(format!("{text}: division by {b}"));
                }
                a / b + 1
            }
            None => evaluate(text, &env).map_err(|e| e.0)?,
        };
"""
_U32_FIRST = """        let v = evaluate(&manifest.grid[axis], &env).map_err(|e| e.0)? as u32;
        if v < 1 || v as i64 > limits[axis] {
            return Err(format!("grid axis {axis} = {v} is outside 1..{}", limits[axis]));
        }
        grid[axis] = v;
"""
_TRY_FROM = """        let g = u32::try_from(v).map_err(|_| format!("grid axis {axis} = {v} does not fit u32"))?;
        if g == 0 || i64::from(g) > limits[axis] {
            return Err(format!("grid axis {axis} = {v} is outside CUDA's 1..{}", limits[axis]));
        }
        grid[axis] = g;
"""
_UNKNOWN = """    if let Some((name, _)) = sizes.iter().find(|(k, _)| !manifest.sizes.contains(k)) {
        return Err(format!("unknown size {name}: the kernel takes {}", manifest.sizes.join(", ")));
    }
"""
_CONSTEXPRS = "        if let Some(v) = value.as_i64() {\n            env.insert(name.clone(), v);\n        }\n"
_BY_TYPE = "(match axis { 0 => i64::from(i32::MAX), _ => i64::from(u16::MAX) })"


def _grid(name, *pairs, **kw):
    return Entry("05_ptx_export_rust.launch_grid", name, "", namespace=(("YOUR_RUST", edit(GRID, *pairs)),), **kw)


LAUNCH_GRID = [
    _grid("own-cdiv-plus-one", _EVAL, _OWN_CDIV, fault="ceiling division off by one",
          why="computes cdiv itself as a / b + 1: one program too many when b divides a"),
    _grid("swapped-axes", "    Ok(grid)", "    Ok([grid[1], grid[0], grid[2]])", fault="swapped",
          why="returns (y, x, z): the heads along x"),
    _grid("u32-overflow", _EVAL + _CHECK, _U32_FIRST, fault="u32 overflow",
          why="converts to u32 before the range check: 2^32 + 1 wraps around to 1"),
    _grid("limit-off-by-one", "if v < 1 || v > limits[axis]", "if v < 1 || v >= limits[axis]", fault="off by one",
          why="refuses the largest grid CUDA allows: the limits are inclusive"),
    _grid("y-limit-everywhere", "if v < 1 || v > limits[axis]", "if v < 1 || v > 65_535", fault="wrong limit for x",
          why="applies y's 65535 to x too"),
    _grid("x-limit-everywhere", "if v < 1 || v > limits[axis]", "if v < 1 || v > limits[0]", fault="the limit of",
          why="applies x's 2^31 - 1 to y and z"),
    _grid("zero-accepted", "if v < 1 || v > limits[axis]", "if v < 0 || v > limits[axis]", fault="zero-sized grid",
          why="lets a grid axis of 0 through"),
    _grid("sizes-only", _CONSTEXPRS, "        let _ = (name, value);\n", fault="refused",
          why="evaluates the grid without the constexprs (BV, BLOCK_SIZE): every launch is refused"),
    _grid("resolve", "    let mut env", "    return manifest.resolve(sizes).map(|p| p.grid).map_err(|e| e.to_string());"
          "\n    #[allow(unreachable_code)]\n    let mut env", fault="resolve",
          why="hands back the launcher's own answer"),
    _grid("unknown-size-accepted", _UNKNOWN, "", fault="unknown size",
          why="ignores a size the manifest does not list, which the launcher refuses"),
    _grid("solution", wrong=False, why="the lesson's grid"),
    _grid("try-from", _CHECK, _TRY_FROM, wrong=False, why="u32::try_from, then the range check"),
    _grid("limits-by-type", "    let limits = [2_147_483_647i64, 65_535, 65_535];\n", "", "limits[axis]", _BY_TYPE,
          "limits[axis]", _BY_TYPE, wrong=False, why="the limits from the integer types' maxima, per axis"),
]

ENTRIES = PREDICT_LAUNCH + BUILD_LAUNCH + LAUNCH_GRID

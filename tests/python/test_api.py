"""The orthojit package's functions (bindings/python/orthojit/api.py) against NumPy float64
Newton-Schulz written here from the formula, on fresh random inputs; the argument checks; zero-copy
output; compiled kernels; DSL programs; and the structured results (plan against the CLI, tune,
bench, info).

Run with the build tree on PYTHONPATH (ctest's python_tests does): PYTHONPATH=build/python
/usr/bin/python3 -m pytest tests/python/test_api.py
"""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import orthojit

try:
    import torch
except ImportError:  # the NumPy half still runs
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

JORDAN = [(3.4445, -4.7750, 2.0315)] * 5  # Keller Jordan's quintic (https://kellerjordan.github.io/posts/muon/)

# Relative Frobenius error against the f64 iteration. f32 storage: every stored value has a relative
# rounding error of at most 2^-24 ~ 6e-8; five steps of a polynomial whose slope is at most a = 3.44
# (the small singular values) amplify that by at most a^5 ~ 490, and the products' accumulation adds
# a few ulps more: ~3e-5 at worst, ~2e-6 observed. 1e-4 leaves room and still catches any wrong
# coefficient, step or transposition (those are O(1e-1) or more, see test_tolerances_discriminate).
F32_TOLERANCE = 1e-4
# bf16 storage (jordan_ns5): X, A = XXᵀ and B are stored with 8 significant bits (unit roundoff
# 2^-8 ~ 3.9e-3) at each of the 5 steps, amplified the same way: a few 1e-2 is the expected size
# (the README's demo shows 1.3e-2 at 128x512; 0.9e-2..2.5e-2 observed over shapes and seeds) and
# the autotuner accepts a bf16 kernel within 3e-2 of its reference. 6e-2 keeps the test from
# flaking on fresh inputs while a wrong kernel (one step fewer: ~0.2 and more) still fails it.
BF16_TOLERANCE = 6e-2


def newton_schulz(g, steps=JORDAN, safety=1.0, eps=1e-7):
    """X = G/(‖G‖_F·safety + eps); X <- aX + (bA + cA²)X with A = XXᵀ; tall matrices transposed."""
    x = np.asarray(g, dtype=np.float64)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = np.swapaxes(x, -1, -2)
    x = x / (np.linalg.norm(x, axis=(-2, -1), keepdims=True) * safety + eps)
    for a, b, c in steps:
        A = x @ np.swapaxes(x, -1, -2)
        x = a * x + (b * A + c * A @ A) @ x
    return np.swapaxes(x, -1, -2) if tall else x


def relative_error(y, reference):
    y = np.asarray(y, dtype=np.float64)
    return float(np.linalg.norm(y - reference) / np.linalg.norm(reference))


rng = np.random.default_rng()  # fresh inputs every run: no fixed seed

SHAPES = [(48, 160), (160, 48), (3, 32, 96), (2, 80, 24), (64, 64)]  # wide, tall, batch, tall batch, square


def random_matrix(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- the math --------------------------------------------------------------------------------------

def test_tolerances_discriminate():
    g = random_matrix((48, 160))
    five, four = newton_schulz(g), newton_schulz(g, JORDAN[:4])
    assert relative_error(four, five) > 3 * BF16_TOLERANCE
    perturbed = newton_schulz(g, [(3.4445, -4.7750, 2.0315 * 1.01)] * 5)
    assert relative_error(perturbed, five) > 10 * F32_TOLERANCE


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("strategy", ["standard", "gram", "auto"])
def test_f32_program_matches_float64_reference(shape, strategy):
    g = random_matrix(shape)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32", strategy=strategy)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == g.shape
    assert relative_error(y, newton_schulz(g)) < F32_TOLERANCE


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bf16_program_matches_float64_reference_loosely(shape):
    g = random_matrix(shape)
    y = orthojit.orthogonalize(g, "jordan_ns5")
    assert y.dtype == np.float32 and y.shape == g.shape
    assert relative_error(y, newton_schulz(g)) < BF16_TOLERANCE


def test_f64_input_on_the_reference_backend_is_the_exact_iteration():
    g = random_matrix((2, 24, 72), np.float64)
    y = orthojit.orthogonalize(g, "jordan_ns5", precision="f64", backend="ref")
    assert y.dtype == np.float64
    assert relative_error(y, newton_schulz(g)) < 1e-12


def test_f64_input_on_the_cpu_backend_returns_float64():
    g = random_matrix((40, 100), np.float64)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32", backend="cpu")
    assert y.dtype == np.float64 and y.shape == g.shape
    assert relative_error(y, newton_schulz(g)) < F32_TOLERANCE


def test_polar_express_program_with_its_normalization():
    program = orthojit.load_program("polar_express5_f32")
    safety, eps, mode = program.normalization
    assert mode == "add"
    g = random_matrix((32, 128))
    y = orthojit.orthogonalize(g, program)
    assert relative_error(y, newton_schulz(g, program.coefficients, safety, eps)) < F32_TOLERANCE


@needs_torch
@pytest.mark.parametrize("shape", [(48, 160), (160, 48), (3, 32, 96)], ids=lambda s: "x".join(map(str, s)))
def test_torch_float32_tensor(shape):
    g = torch.randn(*shape)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and tuple(y.shape) == shape
    assert y.data_ptr() != g.data_ptr()
    assert relative_error(y.numpy(), newton_schulz(g.numpy())) < F32_TOLERANCE


@needs_torch
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_16bit_tensor_comes_back_in_its_dtype(dtype):
    dtype = getattr(torch, dtype)
    g = torch.randn(2, 40, 120).to(dtype)
    y = orthojit.orthogonalize(g)  # jordan_ns5: bf16 storage
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == g.shape
    assert relative_error(y.float().numpy(), newton_schulz(g.float().numpy())) < BF16_TOLERANCE


@needs_torch
def test_torch_float64_and_requires_grad():
    g = torch.randn(30, 90, dtype=torch.float64, requires_grad=True)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32")
    assert y.dtype == torch.float64 and not y.requires_grad
    assert relative_error(y.numpy(), newton_schulz(g.detach().numpy())) < F32_TOLERANCE


# ---- argument errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.complex64, np.float16, np.bool_])
def test_wrong_numpy_dtype_is_a_type_error(dtype):
    with pytest.raises(TypeError) as error:
        orthojit.orthogonalize(np.ones((8, 16), dtype=dtype))
    message = str(error.value)
    assert "float32" in message and "float64" in message  # what is accepted
    assert "has dtype " in message  # and what was received


def test_wrong_dtype_names_what_was_received():
    with pytest.raises(TypeError, match="int64.*accepted: float32 or float64"):
        orthojit.orthogonalize(np.ones((8, 16), dtype=np.int64))


@pytest.mark.parametrize("shape", [(16,), (2, 2, 8, 16), ()])
def test_wrong_rank_is_a_value_error(shape):
    with pytest.raises(ValueError, match=f"{len(shape)} dimensions.*accepted: 2 .*or 3"):
        orthojit.orthogonalize(np.ones(shape, dtype=np.float32))


def test_empty_matrix_is_a_value_error():
    with pytest.raises(ValueError, match="empty dimension"):
        orthojit.orthogonalize(np.ones((0, 16), dtype=np.float32))


def test_non_contiguous_numpy_is_a_value_error():
    g = random_matrix((32, 64))
    for view in (g.T, g[:, ::2], random_matrix((3, 8, 16))[:, :, 1:]):
        with pytest.raises(ValueError, match="not C-contiguous.*ascontiguousarray"):
            orthojit.orthogonalize(view)
    # the contiguous copy the message suggests works
    assert orthojit.orthogonalize(np.ascontiguousarray(g.T)).shape == (64, 32)


def test_not_an_array_is_a_type_error():
    with pytest.raises(TypeError, match="expected an array, got list"):
        orthojit.orthogonalize([[1.0, 2.0], [3.0, 4.0]])


@needs_torch
def test_torch_errors():
    with pytest.raises(TypeError, match="int32.*float32 or float64"):
        orthojit.orthogonalize(torch.ones(8, 16, dtype=torch.int32))
    with pytest.raises(ValueError, match="not C-contiguous.*contiguous"):
        orthojit.orthogonalize(torch.randn(32, 64).t())
    with pytest.raises(ValueError, match="1 dimensions"):
        orthojit.orthogonalize(torch.randn(16))
    with pytest.raises(TypeError, match="device meta"):
        orthojit.orthogonalize(torch.empty(8, 16, device="meta"))


@needs_torch
def test_cuda_tensor_without_cuda_backend_says_why():
    if orthojit.info()["cuda"]["available"] and torch.cuda.is_available():
        g = torch.randn(64, 256, device="cuda")
        y = orthojit.orthogonalize(g)
        assert y.is_cuda and y.shape == g.shape
        assert relative_error(y.float().cpu().numpy(), newton_schulz(g.cpu().numpy())) < BF16_TOLERANCE
        return
    if not torch.cuda.is_available():
        pytest.skip("this torch has no CUDA device to make a CUDA tensor with")
    with pytest.raises(TypeError, match="cuda backend cannot run here"):
        orthojit.orthogonalize(torch.randn(8, 16, device="cuda"))


def test_cuda_backend_unavailable_is_a_value_error():
    if orthojit.info()["cuda"]["available"]:
        pytest.skip("the cuda backend runs here")
    with pytest.raises(ValueError, match="cuda"):
        orthojit.orthogonalize(random_matrix((8, 16)), backend="cuda")


def test_bad_options_are_value_errors():
    g = random_matrix((8, 16))
    with pytest.raises(ValueError, match="strategy: expected one of 'auto', 'standard', 'gram', got 'fast'"):
        orthojit.orthogonalize(g, strategy="fast")
    with pytest.raises(ValueError, match="backend"):
        orthojit.orthogonalize(g, backend="gpu")
    with pytest.raises(ValueError, match="unknown type 'f8'"):
        orthojit.orthogonalize(g, precision="f8")
    with pytest.raises(ValueError, match="cpu backend runs bf16, f16 and f32"):
        orthojit.orthogonalize(g, precision="f64", backend="cpu")
    with pytest.raises(ValueError, match="neither a shipped program nor a readable file.*jordan_ns5"):
        orthojit.orthogonalize(g, program="no_such_program")
    with pytest.raises(TypeError, match="program"):
        orthojit.orthogonalize(g, program=42)


@pytest.mark.parametrize("threads", [10**6, 1025, -1, "2", 2.5, True, None])
def test_threads_outside_zero_to_1024_are_refused(threads):
    # 10**6 started that many threads (no return within a minute, the machine's process limit
    # exhausted); "2" or 2.5 gave a bare signature error listing C++ types.
    g = random_matrix((8, 16))
    with pytest.raises(ValueError, match=r"threads = .*: expected 0 \(one per logical core\) or a whole number from 1 to 1024"):
        orthojit.orthogonalize(g, threads=threads)
    with pytest.raises(ValueError, match="threads"):
        orthojit.bench("jordan_ns5", (8, 16), repeat=1, threads=threads)


# ---- out= ---------------------------------------------------------------------------------

def test_out_numpy_is_written_in_place():
    g = random_matrix((2, 40, 100))
    out = np.full_like(g, np.nan)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32", out=out)
    assert y is out and np.shares_memory(y, out)
    assert not np.shares_memory(y, g)
    assert relative_error(out, newton_schulz(g)) < F32_TOLERANCE


def test_out_float64_is_written_in_place():
    g = random_matrix((24, 48), np.float64)
    out = np.zeros_like(g)
    assert orthojit.orthogonalize(g, "jordan_ns5_f32", out=out) is out
    assert relative_error(out, newton_schulz(g)) < F32_TOLERANCE


def test_out_may_be_the_input():
    g = random_matrix((40, 100))
    expected = newton_schulz(g)
    y = orthojit.orthogonalize(g, "jordan_ns5_f32", out=g)
    assert y is g and relative_error(g, expected) < F32_TOLERANCE


def test_out_errors():
    g = random_matrix((16, 32))
    with pytest.raises(TypeError, match="out has dtype float64 but x is float32"):
        orthojit.orthogonalize(g, out=np.empty((16, 32)))
    with pytest.raises(ValueError, match=r"out has shape \(32, 16\); it must have x's shape"):
        orthojit.orthogonalize(g, out=np.empty((32, 16), np.float32))
    with pytest.raises(ValueError, match="out is not C-contiguous"):
        orthojit.orthogonalize(g, out=np.empty((32, 16), np.float32).T)
    read_only = np.empty_like(g)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        orthojit.orthogonalize(g, out=read_only)


@needs_torch
def test_out_torch_is_written_in_place():
    g = torch.randn(3, 32, 96)
    out = torch.full_like(g, float("nan"))
    pointer = out.data_ptr()
    y = orthojit.orthogonalize(g, "jordan_ns5_f32", out=out)
    assert y is out and out.data_ptr() == pointer
    assert relative_error(out.numpy(), newton_schulz(g.numpy())) < F32_TOLERANCE


@needs_torch
def test_out_of_another_kind_is_refused():
    # The result of one kind written into the other would be whichever the core accepted: refused.
    with pytest.raises(TypeError, match="out must be of x's kind"):
        orthojit.orthogonalize(torch.randn(16, 32), "jordan_ns5_f32", out=np.empty((16, 32), np.float32))
    with pytest.raises(TypeError, match="out must be of x's kind"):
        orthojit.orthogonalize(random_matrix((16, 32)), "jordan_ns5_f32", out=torch.empty(16, 32))


@needs_torch
def test_out_torch_bf16_is_filled():
    g = torch.randn(32, 96).bfloat16()
    out = torch.zeros_like(g)
    assert orthojit.orthogonalize(g, out=out) is out
    assert relative_error(out.float().numpy(), newton_schulz(g.float().numpy())) < BF16_TOLERANCE


# ---- compile --------------------------------------------------------------------------------

def test_compiled_kernel_is_reused():
    kernel = orthojit.compile("jordan_ns5_f32", (48, 160), batch=2, strategy="standard", backend="cpu")
    assert kernel.strategy == "standard" and kernel.backend == "cpu" and kernel.target.startswith("cpu")
    assert kernel.shape == (48, 160) and kernel.batch == 2 and kernel.storage == "f32"
    assert kernel.jit_seconds >= 0 and "gemm" in kernel.ir
    for _ in range(3):
        g = random_matrix((2, 48, 160))
        y = kernel(g)
        assert relative_error(y, newton_schulz(g)) < F32_TOLERANCE
        out = np.empty_like(g)
        assert kernel(g, out=out) is out and np.array_equal(out, y)
    again = orthojit.compile("jordan_ns5_f32", (2, 48, 160), strategy="standard", backend="cpu")
    assert again.jit_seconds == kernel.jit_seconds  # the same compiled kernel, from the cache
    with pytest.raises(ValueError, match=r"compiled for \(2, 48, 160\)"):
        kernel(random_matrix((48, 160)))


def test_compiled_gram_kernel_and_torch():
    kernel = orthojit.compile("jordan_ns5_f32", (96, 32), strategy="gram")
    assert kernel.strategy == "gram"
    g = random_matrix((96, 32))
    assert relative_error(kernel(g), newton_schulz(g)) < F32_TOLERANCE
    if torch is not None:
        t = torch.from_numpy(g)
        assert isinstance(kernel(t), torch.Tensor)


def test_compile_shape_errors():
    with pytest.raises(ValueError, match="positive sizes"):
        orthojit.compile("jordan_ns5", (0, 16))
    # not truncated or cast: (8.7, 16.2) was compiled as 8x16, (True, True) as 1x1, batch "2" as 2
    with pytest.raises(TypeError, match=r"expected whole numbers \(ints\), got \(8.7, 16.2\)"):
        orthojit.compile("jordan_ns5", (8.7, 16.2))
    with pytest.raises(TypeError, match="whole numbers"):
        orthojit.compile("jordan_ns5", (True, True))
    with pytest.raises(TypeError, match="batch must be a whole number"):
        orthojit.compile("jordan_ns5", (8, 16), batch="2")
    with pytest.raises(ValueError, match="has a size above 2147483647"):
        orthojit.compile("jordan_ns5", (2**40, 4))
    with pytest.raises(ValueError, match="batch"):
        orthojit.compile("jordan_ns5", (3, 8, 16), batch=2)


# ---- programs --------------------------------------------------------------------------------

CUSTOM = """
orthogonalizer my_ns3 {
  precision { storage = f32; accumulate = f32; norm = f32; }
  normalize frobenius(safety = 1.0, eps = 1e-7);
  coefficients (3.4445, -4.7750, 2.0315) repeat 3;
  step {
    A = X @ X.T;
    B = b * A + c * A @ A;
    X = a * X + B @ X;
  }
}
"""


def test_load_program_shipped():
    program = orthojit.load_program("jordan_ns5")
    assert program.name == "jordan_ns5" and program.storage == "bf16" and program.steps == 5
    assert program.origin == "shipped"
    np.testing.assert_allclose(program.coefficients, JORDAN)


def test_program_from_source_text_runs():
    try:
        program = orthojit.load_program(CUSTOM)
    except ValueError as error:  # the coefficient syntax differs: say so
        pytest.fail(f"the test's DSL text does not parse: {error}")
    assert program.name == "my_ns3" and program.steps == 3 and program.origin == "source"
    g = random_matrix((32, 80))
    assert relative_error(orthojit.orthogonalize(g, program), newton_schulz(g, JORDAN[:3])) < F32_TOLERANCE
    # the source text itself works wherever a name does
    assert relative_error(orthojit.orthogonalize(g, CUSTOM), newton_schulz(g, JORDAN[:3])) < F32_TOLERANCE


def test_program_from_a_file(tmp_path):
    path = tmp_path / "my_ns3.oj"
    path.write_text(CUSTOM)
    program = orthojit.load_program(path)
    assert program.origin == "file" and program.where == str(path) and program.steps == 3
    g = random_matrix((16, 48))
    assert relative_error(orthojit.orthogonalize(g, str(path)), newton_schulz(g, JORDAN[:3])) < F32_TOLERANCE


def test_program_syntax_error_has_line_and_column(tmp_path):
    broken = CUSTOM.replace("A = X @ X.T;", "A = X @ @ X.T;")
    with pytest.raises(ValueError) as error:
        orthojit.load_program(broken)
    line = broken.splitlines().index("    A = X @ @ X.T;") + 1
    assert str(error.value).startswith(f"<string>:{line}:")  # file:line:column: error: ...
    assert "error" in str(error.value)
    path = tmp_path / "broken.oj"
    path.write_text(broken)
    with pytest.raises(ValueError, match=f"{path}:{line}:[0-9]+: error"):
        orthojit.load_program(str(path))
    with pytest.raises(ValueError, match=f"<string>:{line}:"):
        orthojit.orthogonalize(random_matrix((8, 16)), broken)


# ---- plan, tune, bench, info -------------------------------------------------------------------

def cli_path():
    """build/bin/orthojit next to build/python/orthojit (the build tree), or $ORTHOJIT_CLI."""
    if os.environ.get("ORTHOJIT_CLI"):
        return pathlib.Path(os.environ["ORTHOJIT_CLI"])
    return pathlib.Path(orthojit.__file__).resolve().parents[2] / "bin" / "orthojit"


def source_dir():
    return pathlib.Path(os.environ.get("ORTHOJIT_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def check_plan_invariants(plan, world, stage):
    assert plan["world"] == world and plan["stage"] == stage
    assert plan["partition_elements"] * world == plan["padded_elements"]
    ranks = plan["ranks"]
    assert len(ranks) == world and ranks[0]["begin"] == 0 and ranks[-1]["end"] == plan["padded_elements"]
    for left, right in zip(ranks, ranks[1:]):
        assert left["end"] == right["begin"]
    offset = 0
    for tensor in plan["tensors"]:
        assert tensor["offset"] >= offset
        offset = tensor["offset"] + tensor["elements"]
        owners = {r for r, rank in enumerate(ranks) if rank["begin"] < offset and tensor["offset"] < rank["end"]}
        assert set(tensor["owners"]) == owners
        if tensor["muon"]:
            assert tensor["orthogonalizers"]
    assert offset <= plan["padded_elements"]
    assert sum(rank["matrices"] for rank in ranks) >= sum(t["muon"] for t in plan["tensors"])
    assert plan["max_cost"] >= plan["ideal_cost"] * (1 - 1e-12)


@pytest.mark.parametrize("world,stage,mode", [(4, 2, "deepspeed"), (3, 3, "balanced"), (2, 1, "deepspeed")])
def test_plan_matches_the_cli(world, stage, mode):
    plan = orthojit.plan("default", world, stage, mode=mode)
    check_plan_invariants(plan, world, stage)
    assert plan["mode"] == mode
    cli = cli_path()
    if not cli.exists():
        pytest.skip(f"no CLI at {cli} to compare with (set ORTHOJIT_CLI)")
    result = subprocess.run([str(cli), "plan", "--model", "default", "--world", str(world), "--stage", str(stage), "--mode", mode, "--json"],
                            capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == plan


def test_plan_from_a_dict_and_a_path():
    path = source_dir() / "examples" / "models" / "gpt2-small.json"
    if not path.exists():
        pytest.skip(f"{path} is missing")
    from_path = orthojit.plan(path, 8, 2, mode="balanced", alignment=64)
    from_dict = orthojit.plan(json.loads(path.read_text()), 8, 2, mode="balanced", alignment=64)
    check_plan_invariants(from_path, 8, 2)
    assert from_path["title"] != from_dict["title"]
    assert {k: v for k, v in from_path.items() if k != "title"} == {k: v for k, v in from_dict.items() if k != "title"}
    assert all(t["offset"] % 64 == 0 for t in from_path["tensors"])
    # balanced mode computes each matrix exactly once
    assert all(len(t["orthogonalizers"]) == 1 for t in from_path["tensors"] if t["muon"])


def test_plan_errors(tmp_path):
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        orthojit.plan("default", 2, 4)
    with pytest.raises(ValueError, match="mode"):
        orthojit.plan("default", 2, 1, mode="fastest")
    with pytest.raises(ValueError, match="world must be at least 1"):
        orthojit.plan("default", 0, 1)
    with pytest.raises(ValueError, match="cannot read the model configuration"):
        orthojit.plan(str(tmp_path / "missing.json"), 2, 1)
    with pytest.raises(ValueError, match=r'model_config \(dict\): .*has no "'):
        orthojit.plan({"model_type": "llama", "hidden_size": 64}, 2, 1)


def test_tune_a_tiny_shape_into_a_file(tmp_path):
    records = tmp_path / "records.json"
    result = orthojit.tune(shape=(24, 96), program="jordan_ns5_f32", budget=1, out=records)
    assert result["records"] == str(records) and records.exists()
    [row] = result["shapes"]
    assert (row["rows"], row["cols"], row["batch"]) == (24, 96, 1) and not row["cached"]
    assert row["winner"] and row["winner_ms"] > 0
    assert row["entry"]["winner"]["label"] == row["winner"]
    on_disk = json.loads(records.read_text())
    assert row["key"] in json.dumps(on_disk)
    # the transpose shares the record
    again = orthojit.tune(shape=(96, 24), program="jordan_ns5_f32", budget=1, out=str(records))
    assert again["shapes"][0]["cached"] and again["shapes"][0]["winner"] == row["winner"]


def test_tune_a_model_dict(tmp_path):
    config = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 100}
    try:
        result = orthojit.tune(config, budget=1, program="jordan_ns5_f32", out=tmp_path / "r.json")
    except ValueError as error:
        pytest.fail(f"the tiny config is not accepted: {error}")
    assert result["shapes"] and all("winner" in row for row in result["shapes"])
    assert result["adamw"]  # embeddings / lm_head are AdamW's


def test_tune_reports_progress_for_every_shape(tmp_path):
    config = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 100}
    calls = []
    result = orthojit.tune(config, budget=1, program="jordan_ns5_f32", out=tmp_path / "r.json",
                           progress=lambda *args: calls.append(args))
    shapes = len(result["shapes"])
    finished = [c for c in calls if c[5] in ("done", "cached")]
    # one "done" per shape, in order, with the shape's text; candidates counted within each shape
    assert [c[0] for c in finished] == list(range(shapes)) and all(c[1] == shapes for c in calls)
    assert [c[2] for c in finished] == [f"{row['rows']}x{row['cols']}" + (f"x{row['batch']}" if row["batch"] > 1 else "") for row in result["shapes"]]
    assert any(c[5] == "check" for c in calls) and all(1 <= c[3] <= c[4] for c in calls)
    # the default bar (tqdm where installed, else stderr lines or nothing) never breaks the call
    assert orthojit.tune(config, budget=1, program="jordan_ns5_f32", out=tmp_path / "r.json")["shapes"]


def test_an_exception_in_the_progress_callback_stops_the_tuning_and_reaches_the_caller(tmp_path):
    # It was printed as "Exception ignored" at every call and the tuning went on: Ctrl-C, which
    # Python raises inside the callback, did not stop a tune, nor did a callback of the wrong
    # signature. The shapes finished before it stay in the records file.
    calls = []

    def interrupt(*args):
        calls.append(args)
        if args[5] == "check" and args[0] == 1:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        orthojit.tune({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
                       "num_key_value_heads": 2, "vocab_size": 100}, budget=30, program="jordan_ns5_f32", out=tmp_path / "r.json",
                      progress=interrupt)
    assert calls[-1][0] == 1 and calls[-1][5] == "check", "calls went on after the exception"
    assert len(json.loads((tmp_path / "r.json").read_text())["entries"]) == 1, "the first shape's record was not kept"
    with pytest.raises(TypeError, match="positional argument"):
        orthojit.tune(shape=(8, 32), budget=30, out=tmp_path / "r.json", progress=lambda shape: None)


def test_a_directory_where_a_file_is_expected_is_named_as_one(tmp_path):
    # "found end of file" and "not valid JSON" before
    with pytest.raises(ValueError, match="is a directory; give a .oj file"):
        orthojit.load_program(str(tmp_path))
    with pytest.raises(ValueError, match="is a directory; give its config.json"):
        orthojit.plan(tmp_path, world=2, stage=1)
    with pytest.raises(ValueError, match="world = 1099511627776: expected a whole number"):
        orthojit.plan("default", world=2**40, stage=1)


def test_tune_errors():
    with pytest.raises(ValueError, match="exactly one"):
        orthojit.tune()
    with pytest.raises(ValueError, match="budget"):
        orthojit.tune(shape=(8, 32), budget=-3)
    with pytest.raises(ValueError, match="backend"):
        orthojit.tune(shape=(8, 32), backend="gpu")


def test_tune_with_searched_gram_restarts(tmp_path):
    # restarts="auto": the restart search's positions (docs/autotuning.md, "Gram restarts") are
    # tuned with and stored in the record; deepseek_v4 in f16 overflows Q with its own [2]
    records = tmp_path / "records.json"
    result = orthojit.tune(shape=(16, 64), program="deepseek_v4", precision="f16", budget=1, out=records, restarts="auto")
    chosen = result["restarts"]["restarts"]
    assert result["restarts"]["source"] == "auto" and chosen != [2] and all(1 <= k <= 9 for k in chosen)
    assert result["restarts"]["search"]["program"]["max_abs_q"] == "inf"
    [row] = result["shapes"]
    assert row["gram_restarts"] == chosen and row["entry"]["gram_restarts"] == chosen
    assert json.loads(records.read_text())["entries"][row["key"]]["gram_restarts_source"] == "auto"
    # asked again with the same restarts: the record stands; with others: tuned again
    assert orthojit.tune(shape=(16, 64), program="deepseek_v4", precision="f16", budget=1, out=records, restarts=chosen)["shapes"][0]["cached"]
    other = orthojit.tune(shape=(16, 64), program="deepseek_v4", precision="f16", budget=1, out=records, restarts=[])
    assert not other["shapes"][0]["cached"] and other["shapes"][0]["gram_restarts"] == []


def test_tune_restart_errors():
    with pytest.raises(ValueError, match=r"restart position 7 is outside 1\.\.4"):
        orthojit.tune(shape=(8, 32), restarts=[2, 7])
    with pytest.raises(ValueError, match="expected auto, none, program, or comma-separated step indices"):
        orthojit.tune(shape=(8, 32), restarts="sometimes")
    with pytest.raises(TypeError, match="not a step index"):
        orthojit.tune(shape=(8, 32), restarts=[2.5])


def test_bench_returns_positive_times():
    record = orthojit.bench("jordan_ns5", (32, 128), repeat=3, strategy="gram")
    assert record["program"] == "jordan_ns5" and record["shape"] == [32, 128, 1] and record["strategy"] == "gram"
    assert 0 < record["p20_s"] <= record["median_s"] <= record["p80_s"]
    assert record["median_ms"] == pytest.approx(record["median_s"] * 1e3)
    assert record["gflops"] > 0 and record["repeat"] == 3 and record["backend"] == "cpu"
    ref = orthojit.bench("jordan_ns5_f32", "8x16x2", backend="ref", precision="f64", repeat=1)
    assert ref["shape"] == [8, 16, 2] and ref["storage"] == "f64" and ref["median_s"] > 0


def test_bench_kernel_forces_the_engine_of_bf16_products():
    # The default engine is the one info names; kernel="fma" forces widened f32 FMAs everywhere.
    default = orthojit.bench("jordan_ns5", (32, 128), repeat=1, strategy="standard")
    assert default["engine"] == orthojit.info()["bf16_kernel"]["default"]
    forced = orthojit.bench("jordan_ns5", (32, 128), repeat=1, strategy="standard", kernel="fma")
    assert forced["engine"] == "fma" and "bf16dot" not in forced["target"]
    with pytest.raises(ValueError, match="kernel"):
        orthojit.bench("jordan_ns5", (32, 128), repeat=1, kernel="tpu")


def test_bench_model_compares_strategies():
    result = orthojit.bench_model(shape=(32, 128), budget=1)
    [row] = result["shapes"]
    assert row["standard_ms"] > 0 and row["gram_ms"] > 0 and row["openblas_ms"] > 0 and row["vendor_speedup"] > 0


def _bar_heights(ax):
    # The chart's bars in drawing order: one series after the other, shapes left to right.
    import matplotlib.patches
    return [patch.get_height() for patch in ax.patches if isinstance(patch, matplotlib.patches.Rectangle)]


def test_bench_model_plot_draws_each_shapes_speedups(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # A record as bench_model writes it, with a shape whose vendor figure is missing (not timed
    # within the budget): that bar is drawn at 0, and every other bar is its shape's ratio.
    record = orthojit.BenchModelResult({"title": "two shapes", "shapes": [
        {"label": "1024x4096", "count": 4, "gram_speedup": 1.6, "vendor_speedup": 1.3},
        {"label": "4096x4096", "count": 2, "gram_speedup": 0.9, "vendor_speedup": None}]})
    figure, ax = plt.subplots()
    assert record.plot(ax=ax) is figure
    assert _bar_heights(ax) == pytest.approx([1.6, 0.9, 1.3, 0.0])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1024x4096\n(4 per step)", "4096x4096\n(2 per step)"]
    plt.close(figure)
    # A real run: the returned record draws itself into a PNG file.
    result = orthojit.bench_model(shape=(32, 128), budget=1)
    assert isinstance(result, dict) and isinstance(result, orthojit.BenchModelResult)
    png = tmp_path / "speedups.png"
    figure = result.plot(png)
    [row] = result["shapes"]
    assert _bar_heights(figure.axes[0]) == pytest.approx([row["gram_speedup"], row["vendor_speedup"]])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(figure)


def test_info():
    info = orthojit.info()
    assert info["version"] == orthojit.__version__
    assert "cpu" in info["backends"] and "ref" in info["backends"]
    assert isinstance(info["cuda"]["available"], bool)
    assert info["cuda"]["available"] or info["cuda"]["reason"]
    assert info["cache_dir"] and info["host_cpu"]["logical_cores"] >= 1
    names = {p["name"] for p in info["programs"]}
    assert {"jordan_ns5", "jordan_ns5_f32", "polar_express5"} <= names


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_non_finite_input_is_a_value_error_naming_the_element(backend):
    if backend not in orthojit.info().get("backends", []):
        pytest.skip(f"this build has no {backend} backend")
    x = np.random.default_rng(4).standard_normal((6, 9)).astype(np.float32)
    x[2, 7] = np.nan
    with pytest.raises(ValueError, match=r"element \(2, 7\) is nan"):
        orthojit.orthogonalize(x, backend=backend)
    x[2, 7] = np.inf
    with pytest.raises(ValueError, match="finite values"):
        orthojit.orthogonalize(x, backend=backend)


def test_huge_float32_input_comes_back_orthogonalized_not_zero():
    # Σx² of a 64 x 256 matrix of 1e18 overflows float32; the scaled norm keeps the result.
    x = np.random.default_rng(5).standard_normal((64, 256))
    small = orthojit.orthogonalize(x.astype(np.float32), program="jordan_ns5_f32")
    huge = orthojit.orthogonalize((x * 1e18).astype(np.float32), program="jordan_ns5_f32")
    assert np.isfinite(huge).all()
    assert np.max(np.abs(huge - small)) < 1e-3 * np.max(np.abs(small))  # f32 rounding of the scaled input, amplified a little

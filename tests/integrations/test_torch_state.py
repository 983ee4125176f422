"""Tests for torch objects in checkpoint trees: tensors of every dtype, modules, optimizers."""

import random
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from globalstep import CheckpointManager, Clock, ConfigError, RestoreMismatchError  # noqa: E402
from globalstep.checkpoint._tree import adapters  # noqa: E402
from globalstep.integrations.torch import RNGState  # noqa: E402

QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}
ALL_DTYPES = sorted(
    {v for v in vars(torch).values() if isinstance(v, torch.dtype)} - QUANTIZED, key=str
)


def _random_tensor(dtype, shape=(3, 5), seed=0):
    """A tensor of ``dtype`` holding random bits (NaNs and all)."""
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw[: int(np.prod(shape))] % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)


def _bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


def _roundtrip(tmp_path, saved, template=None, **restore):
    with CheckpointManager(tmp_path / "ckpt", max_to_keep=None) as manager:
        manager.save(0, saved, force=True)
        return manager.restore(template, **restore)


@pytest.fixture(autouse=True)
def _quiet_complex_half():
    """complex32 tensors warn that ComplexHalf is experimental; that is torch's note."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ComplexHalf support is experimental")
        yield


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_round_trips_in_place(tmp_path, dtype):
    """A tensor of each torch dtype restores bit for bit into the template tensor itself."""
    original = _random_tensor(dtype)
    target = torch.zeros_like(original)
    pointer = target.data_ptr()
    tree = _roundtrip(tmp_path, {"t": original}, {"t": target})
    assert tree["t"] is target
    assert target.data_ptr() == pointer
    assert _bits(target) == _bits(original)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype_round_trips_without_template(tmp_path, dtype):
    """Restored without a template, a tensor of each dtype comes back as a torch tensor."""
    original = _random_tensor(dtype, shape=(4,))
    tree = _roundtrip(tmp_path, {"t": original})
    assert tree["t"].dtype == dtype
    assert _bits(tree["t"]) == _bits(original)


def test_bfloat16_stored_as_safetensors_bf16(tmp_path):
    """A bfloat16 tensor is stored under safetensors' BF16 code, readable by safetensors."""
    st = pytest.importorskip("safetensors.torch")
    original = torch.randn(4, 3).bfloat16()
    _roundtrip(tmp_path, {"w": original})
    (step_dir,) = (tmp_path / "ckpt").glob("step-*")
    loaded = st.load_file(step_dir / "arrays.safetensors")
    assert torch.equal(loaded["w"], original)


def test_zero_dim_empty_and_strided_tensors(tmp_path):
    """A 0-d tensor, an empty one and a transposed view restore in place."""
    saved = {"s": torch.tensor(3.5), "e": torch.zeros(0, 4), "v": torch.arange(6.0).reshape(2, 3).T}
    base = torch.zeros(2, 3)
    template = {"s": torch.tensor(0.0), "e": torch.ones(0, 4), "v": base.T}
    _roundtrip(tmp_path, saved, template)
    assert template["s"].item() == 3.5
    assert torch.equal(base.T, saved["v"])


def test_conjugate_and_negative_views_are_resolved(tmp_path):
    """A conjugated complex view is saved with its conjugate values."""
    z = torch.tensor([1 + 2j, 3 - 1j])
    tree = _roundtrip(tmp_path, {"z": z.conj()})
    assert torch.equal(tree["z"], torch.tensor([1 - 2j, 3 + 1j]))


def test_parameter_restored_in_place_keeps_autograd(tmp_path):
    """A Parameter restored in place stays the same leaf that requires grad."""
    p = torch.nn.Parameter(torch.randn(3))
    q = torch.nn.Parameter(torch.zeros(3))
    _roundtrip(tmp_path, {"p": p}, {"p": q})
    assert q.requires_grad
    assert torch.equal(q.detach(), p.detach())


def test_quantized_tensor_is_refused(tmp_path):
    """A quantized tensor is refused with a hint to dequantize it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8)
    with pytest.raises(ConfigError, match="dequantize"):
        _roundtrip(tmp_path, {"q": q})


def test_sparse_tensor_is_refused(tmp_path):
    """A sparse tensor is refused with a hint to densify it."""
    with pytest.raises(ConfigError, match="to_dense"):
        _roundtrip(tmp_path, {"s": torch.eye(3).to_sparse()})


def test_shape_mismatch_names_the_path(tmp_path):
    """A template tensor of another shape is reported with its path."""
    with pytest.raises(RestoreMismatchError, match="t: expected float32"):
        _roundtrip(tmp_path, {"t": torch.zeros(3)}, {"t": torch.zeros(4)})


class Net(torch.nn.Module):
    """A user's module, defined outside torch (found through its base class)."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))


def _trained(seed=0):
    torch.manual_seed(seed)
    net = Net()
    net(torch.randn(5, 4)).sum().backward()  # moves the BatchNorm statistics
    return net


def test_user_module_found_by_its_base():
    """An nn.Module subclass defined outside torch gets the torch.nn.Module adapter."""
    assert adapters.find(Net()).name == "torch.nn.Module"


def test_module_round_trip_in_place(tmp_path):
    """A module's parameters and buffers restore into a fresh module's own tensors."""
    saved, fresh = _trained(0), _trained(1)
    pointer = fresh.head.weight.data_ptr()
    tree = _roundtrip(tmp_path, {"model": saved}, {"model": fresh})
    assert tree["model"] is fresh
    assert fresh.head.weight.data_ptr() == pointer
    for (k, a), (_, b) in zip(saved.state_dict().items(), fresh.state_dict().items(), strict=False):
        assert torch.equal(a, b), k


def _compiled(net):
    with warnings.catch_warnings():
        # torch.compile imports inductor, which warns about torch.jit.script_method.
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.compile(net)


def _data_parallel(net):
    return torch.nn.DataParallel(net)


@pytest.mark.parametrize("wrap", [_compiled, _data_parallel], ids=["compile", "DataParallel"])
@pytest.mark.parametrize("direction", ["wrapped->bare", "bare->wrapped"])
def test_wrapped_module_prefixes_both_ways(tmp_path, wrap, direction):
    """A module saved wrapped restores into the bare one, and the other way round."""
    saved, fresh = _trained(0), _trained(1)
    if direction == "wrapped->bare":
        _roundtrip(tmp_path, {"m": wrap(saved)}, {"m": fresh})
    else:
        _roundtrip(tmp_path, {"m": saved}, {"m": wrap(fresh)})
    assert torch.equal(fresh.head.weight, saved.head.weight)
    assert torch.equal(fresh.body[1].running_mean, saved.body[1].running_mean)


def test_ddp_prefix_both_ways(tmp_path):
    """A DistributedDataParallel model's checkpoint has the bare keys, both ways."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        saved, fresh = _trained(0), _trained(1)
        ddp = torch.nn.parallel.DistributedDataParallel(saved)
        assert next(iter(ddp.state_dict())).startswith("module.")
        _roundtrip(tmp_path, {"m": ddp}, {"m": fresh})
        assert torch.equal(fresh.head.weight, saved.head.weight)
        other = _trained(2)
        with CheckpointManager(tmp_path / "ckpt", max_to_keep=None) as manager:
            manager.restore({"m": torch.nn.parallel.DistributedDataParallel(other)})
        assert torch.equal(other.head.weight, saved.head.weight)
    finally:
        dist.destroy_process_group()


def test_compiled_submodule_prefix(tmp_path):
    """A submodule compiled inside a model saves and restores under the bare key."""
    saved, fresh = _trained(0), _trained(1)
    saved.head = _compiled(saved.head)
    _roundtrip(tmp_path, {"m": saved}, {"m": fresh})
    assert torch.equal(fresh.head.weight, saved.head._orig_mod.weight)


def test_module_missing_key_is_a_mismatch(tmp_path):
    """A module with another architecture is reported key by key, and left untouched."""
    saved = _trained(0)
    other = torch.nn.Sequential(torch.nn.Linear(4, 8))
    before = other[0].weight.clone()
    with pytest.raises(RestoreMismatchError, match="unexpected"):
        _roundtrip(tmp_path, {"m": saved}, {"m": other})
    assert torch.equal(other[0].weight, before)


def _train(model, opt, steps, seed):
    torch.manual_seed(seed)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True),
        lambda p: torch.optim.Adagrad(p, lr=0.01),
    ],
    ids=["AdamW", "SGD", "Adagrad"],
)
def test_optimizer_resumes_exactly_into_fresh_one(tmp_path, make):
    """An optimizer restored into a fresh one (no state yet) continues bit for bit."""
    model = _trained(0)
    opt = make(model.parameters())
    _train(model, opt, 3, seed=1)
    _roundtrip(tmp_path, {"model": model, "opt": opt})
    fresh_model = _trained(5)
    fresh_opt = make(fresh_model.parameters())
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore({"model": fresh_model, "opt": fresh_opt})
    _train(model, opt, 2, seed=2)
    _train(fresh_model, fresh_opt, 2, seed=2)
    for a, b in zip(model.parameters(), fresh_model.parameters(), strict=False):
        assert torch.equal(a, b)


def test_optimizer_param_groups_and_tuple_options(tmp_path):
    """Two param groups keep their own lr, and betas come back as a tuple."""
    model = _trained(0)
    opt = torch.optim.Adam(
        [{"params": model.body.parameters(), "lr": 0.1}, {"params": model.head.parameters()}],
        lr=0.01,
        betas=(0.8, 0.9),
    )
    _train(model, opt, 1, seed=1)
    fresh = torch.optim.Adam(
        [{"params": model.body.parameters()}, {"params": model.head.parameters()}], lr=0.5
    )
    _roundtrip(tmp_path, {"opt": opt}, {"opt": fresh})
    assert [g["lr"] for g in fresh.param_groups] == [0.1, 0.01]
    assert fresh.param_groups[1]["betas"] == (0.8, 0.9)


def test_optimizer_non_tensor_state(tmp_path):
    """LBFGS's state (ints, floats, lists of tensors) round-trips."""
    w = torch.nn.Parameter(torch.tensor([1.5, -2.0]))
    opt = torch.optim.LBFGS([w], lr=0.5, history_size=3)

    def closure():
        opt.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
    w2 = torch.nn.Parameter(w.detach().clone())
    fresh = torch.optim.LBFGS([w2], lr=0.5, history_size=3)
    _roundtrip(tmp_path, {"opt": opt}, {"opt": fresh})
    a, b = opt.state_dict()["state"][0], fresh.state_dict()["state"][0]
    assert a["n_iter"] == b["n_iter"]
    assert a["func_evals"] == b["func_evals"]
    assert all(torch.equal(x, y) for x, y in zip(a["old_dirs"], b["old_dirs"], strict=False))


def test_optimizer_group_count_mismatch(tmp_path):
    """An optimizer with another number of parameters in a group is a mismatch."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))] * 1, lr=0.1)
    other = torch.optim.SGD(
        [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))], lr=0.1
    )
    with pytest.raises(RestoreMismatchError, match="param_groups/0/params"):
        _roundtrip(tmp_path, {"opt": opt}, {"opt": other})


def test_optimizer_without_template_is_torch_state_dict(tmp_path):
    """Restored without a template, an optimizer is a torch state dict with int keys."""
    model = _trained(0)
    opt = torch.optim.AdamW(model.parameters())
    _train(model, opt, 1, seed=0)
    tree = _roundtrip(tmp_path, {"opt": opt})
    fresh = torch.optim.AdamW(model.parameters())
    fresh.load_state_dict(tree["opt"])
    assert sorted(tree["opt"]["state"]) == list(range(len(list(model.parameters()))))


def test_scaler_scheduler_generator_rng(tmp_path):
    """GradScaler, an LRScheduler, a torch.Generator and RNGState restore their state."""
    w = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=50)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale(torch.ones(1))
    scaler.update(new_scale=256.0)
    gen = torch.Generator().manual_seed(7)
    for _ in range(5):
        w.grad = torch.ones(2)
        opt.step()
        sched.step()
    torch.rand(4, generator=gen)  # moves the generator
    rng = RNGState()
    state = {"opt": opt, "sched": sched, "scaler": scaler, "gen": gen, "rng": rng}
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(5, state, force=True)
    expect = (torch.rand(3, generator=gen), torch.rand(2), random.random(), np.random.rand())

    w2 = torch.nn.Parameter(torch.zeros(2))
    opt2 = torch.optim.SGD([w2], lr=0.1, momentum=0.9)
    sched2 = torch.optim.lr_scheduler.OneCycleLR(opt2, max_lr=1.0, total_steps=50)
    scaler2 = torch.amp.GradScaler("cpu")
    gen2 = torch.Generator()
    torch.manual_seed(123)
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore(
            {"opt": opt2, "sched": sched2, "scaler": scaler2, "gen": gen2, "rng": RNGState()}
        )
    got = (torch.rand(3, generator=gen2), torch.rand(2), random.random(), np.random.rand())
    assert torch.equal(got[0], expect[0])
    assert torch.equal(got[1], expect[1])
    assert got[2:] == expect[2:]
    assert scaler2.get_scale() == 256.0
    assert sched2.last_epoch == 5
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_generator_without_template(tmp_path):
    """A torch.Generator restored without a template is a new generator in that state."""
    gen = torch.Generator().manual_seed(3)
    tree = _roundtrip(tmp_path, {"g": gen})
    assert torch.equal(torch.rand(2, generator=tree["g"]), torch.rand(2, generator=gen))


def test_rng_state_refuses_malformed_state():
    """RNGState.load_state_dict names a malformed state."""
    with pytest.raises(ConfigError, match=r"RNGState\.state_dict"):
        RNGState().load_state_dict({"python": {}})


def test_rng_state_refuses_bad_cuda_flag():
    """RNGState(cuda=...) must be a bool."""
    with pytest.raises(ConfigError, match="cuda"):
        RNGState(cuda="yes")


def test_rng_state_cuda_count_mismatch():
    """CUDA generator states for another device count are refused with the way out."""
    rng = RNGState(cuda=True)
    state = RNGState(cuda=False).state_dict()
    state["cuda"] = [np.zeros(16, np.uint8)] * (torch.cuda.device_count() + 1)
    with pytest.raises(ConfigError, match="cuda=False"):
        rng.load_state_dict(state)


def test_clock_and_module_in_one_tree(tmp_path):
    """A clock beside torch objects restores too (state.json records its progress)."""
    clock = Clock()
    clock.tick(3)
    fresh = Clock()
    _roundtrip(tmp_path, {"clock": clock, "m": _trained(0)}, {"clock": fresh, "m": _trained(1)})
    assert fresh.step == 3


def test_no_torch_import_without_torch_objects():
    """Saving a tree without torch objects does not import torch (checked in a fresh process)."""
    import subprocess
    import sys

    code = (
        "import sys, tempfile, numpy as np, globalstep\n"
        "with globalstep.CheckpointManager(tempfile.mkdtemp()) as m:\n"
        "    m.save(1, {'clock': globalstep.Clock(), 'w': np.ones(2), 'n': [1, {'a': None}]})\n"
        "    m.restore({'clock': globalstep.Clock(), 'w': np.zeros(2), 'n': [1, {'a': None}]})\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_tensor_over_2_gib_round_trips_in_place(tmp_path):
    """A uint8 tensor of 2 GiB + 64 bytes restores in place, every byte checked by chunks."""
    meminfo = Path("/proc/meminfo")
    available = 0
    if meminfo.exists():
        line = next(x for x in meminfo.read_text().splitlines() if x.startswith("MemAvailable"))
        available = int(line.split()[1]) * 1024
    if available < 8 * 2**30:
        pytest.skip("needs 8 GiB of free memory (the tensor is 2 GiB)")
    n = 2**31 + 64
    big = torch.empty(n, dtype=torch.uint8)
    chunk = 2**26
    pattern = (torch.arange(chunk, dtype=torch.int64) % 251).to(torch.uint8)
    for start in range(0, n, chunk):
        piece = big[start : start + chunk]
        piece.copy_(pattern[: piece.numel()])
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(1, {"big": big}, force=True)
        big.zero_()
        pointer = big.data_ptr()
        manager.restore({"big": big})
    assert big.data_ptr() == pointer
    for start in range(0, n, chunk):
        piece = big[start : start + chunk]
        assert torch.equal(piece, pattern[: piece.numel()]), start

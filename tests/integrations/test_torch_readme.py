"""The README's PyTorch snippet runs as written, its elided update filled in."""

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parents[2] / "README.md"
UPDATE = """\
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""


# The snippet's DataLoader forks 2 workers; where an earlier test imported JAX, JAX warns at
# the fork, which does not apply to workers that never touch JAX.
@pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")
def test_readme_torch_snippet_runs_and_resumes(tmp_path):
    """The snippet trains to `total` updates, then a second run restores and stops at once."""
    import globalstep
    from globalstep.schedules import CosineDecay

    (block,) = [
        b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.S) if "gst.attach" in b
    ]
    code = re.sub(r"^\s+\.\.\..*\n", UPDATE, block, flags=re.M)

    def run():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        namespace = {
            "torch": torch,
            "DataLoader": torch.utils.data.DataLoader,
            "dataset": torch.utils.data.TensorDataset(torch.randn(32, 3), torch.randn(32, 1)),
            "model": model,
            "opt": torch.optim.SGD(model.parameters(), lr=0.1),
            "scaler": torch.amp.GradScaler("cpu"),
            "clock": globalstep.Clock(),
            "schedule": CosineDecay(0.1, 8),
            "manager": globalstep.CheckpointManager(tmp_path, max_to_keep=1),
            "total": 8,
        }
        exec(code, namespace)
        namespace["manager"].save(namespace["clock"], namespace["state"], force=True)
        namespace["manager"].close()
        return namespace

    first = run()
    assert first["clock"].step == 8
    second = run()
    assert second["clock"].step == 8
    assert second["sampler"].state_dict() == first["sampler"].state_dict()
    assert torch.equal(second["model"].weight, first["model"].weight)

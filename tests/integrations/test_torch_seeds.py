"""The seeds' custom loops (../shared/seeds/) written in PyTorch with globalstep."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from globalstep import CheckpointManager, Clock, every  # noqa: E402
from globalstep.compat import tf as compat_tf  # noqa: E402
from globalstep.integrations.torch import attach  # noqa: E402

# The seed's output: tf.compat.v1.train.exponential_decay(1.0, global_step, 100000, 0.96) at
# global steps 0..23, two epochs of 12 batches of 100 rows, as the TensorFlow of 2020 printed
# them. Today's TensorFlow (and compat.tf) differ from these by at most one float32 ulp
# (2**-24 just below 1.0); the exact check is against the installed TensorFlow.
SEED_RATES = [
    1.0, 0.9999996423721313, 0.9999992251396179, 0.9999988079071045, 0.9999983906745911,
    0.9999979734420776, 0.9999975562095642, 0.9999971389770508, 0.9999967217445374,
    0.9999963045120239, 0.9999958872795105, 0.9999954700469971, 0.9999950528144836,
    0.9999946355819702, 0.9999942183494568, 0.9999938607215881, 0.9999934434890747,
    0.999993085861206, 0.9999926686286926, 0.9999922513961792, 0.9999918341636658,
    0.9999914169311523, 0.9999909996986389, 0.9999905824661255,
]  # fmt: skip


def test_thousand_updates_log_every_hundred():
    """1,000 updates with a log every 100 log at steps 100..1000 and end at step 1000."""
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = Clock()
    attach(opt, clock)
    log = every(100)
    x, y = torch.randn(100, 5), torch.randn(100, 10)
    logged = []
    for _ in range(1000):
        loss = torch.mean((model(x) - y) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()  # applies the gradients and advances the step
        if log.should_fire(clock):
            logged.append((clock.step, loss.item()))
    assert clock.step == 1000
    assert [s for s, _ in logged] == list(range(100, 1001, 100))
    assert logged[-1][1] < logged[0][1]


def _torch_rates():
    """The rates a torch loop with attach() uses at steps 0..23 (2 epochs of 12 batches)."""
    model = torch.nn.Linear(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    clock = Clock(steps_per_epoch=12, batch_size=100)
    rate = compat_tf.exponential_decay(1.0, clock, 100000, 0.96)
    attach(opt, clock, rate)  # the decayed rate, as the seed builds it
    x, y = torch.randn(1200, 5), torch.randint(0, 2, (1200,))
    used = []
    for _ in range(2):
        for i in range(12):
            xb, yb = x[i * 100 : (i + 1) * 100], y[i * 100 : (i + 1) * 100]
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            printed = rate()  # what the seed prints before the update, at this step
            opt.step()
            used.append(opt.param_groups[0]["lr"])
            assert used[-1] == printed
    assert (clock.step, clock.epoch, clock.samples) == (24, 2, 2400)
    return used


def test_exponential_decay_rates_match_the_seed():
    """The rates used at steps 0..23 are the seed's printed rates, to one float32 ulp."""
    used = _torch_rates()
    assert used[0] == 1.0
    assert all(abs(a - b) <= 2**-24 for a, b in zip(used, SEED_RATES, strict=True))
    assert all(a > b for a, b in itertools.pairwise(used))


def test_exponential_decay_rates_equal_installed_tensorflow():
    """The rates used at steps 0..23 equal the installed TensorFlow's float32 rates exactly."""
    tf = pytest.importorskip("tensorflow")
    step = tf.Variable(0, trainable=False, dtype=tf.int32)
    decayed = tf.compat.v1.train.exponential_decay(1.0, step, 100000, 0.96)
    theirs = []
    for k in range(24):
        step.assign(k)
        theirs.append(float(decayed()))
    assert _torch_rates() == theirs


def test_gan_critic_five_per_generator_update_two_clocks(tmp_path):
    """A WGAN loop: the critic's clock runs 5 steps per generator step; both checkpoint."""
    torch.manual_seed(0)
    gen, critic = torch.nn.Linear(2, 1), torch.nn.Linear(1, 1)
    opt_g = torch.optim.RMSprop(gen.parameters(), lr=5e-5)
    opt_c = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
    g_clock, c_clock = Clock("generator"), Clock("critic")
    attach(opt_g, g_clock, compat_tf.exponential_decay(5e-5, g_clock, 10, 0.5).schedule)
    attach(opt_c, c_clock, compat_tf.exponential_decay(5e-5, c_clock, 10, 0.5).schedule)
    manager = CheckpointManager(tmp_path, max_to_keep=1)
    for _ in range(6):
        for _ in range(5):
            real, fake = torch.randn(16, 1) + 3, gen(torch.randn(16, 2)).detach()
            c_loss = critic(fake).mean() - critic(real).mean()
            opt_c.zero_grad()
            c_loss.backward()
            opt_c.step()
        g_loss = -critic(gen(torch.randn(16, 2))).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
    state = {"generator": g_clock, "critic": c_clock, "g": gen, "c": critic}
    state |= {"opt_g": opt_g, "opt_c": opt_c}
    manager.save(g_clock, state)
    assert (g_clock.step, c_clock.step) == (6, 30)
    assert opt_c.param_groups[0]["lr"] == pytest.approx(5e-5 * 0.5 ** (29 / 10), rel=1e-6)
    assert opt_g.param_groups[0]["lr"] == pytest.approx(5e-5 * 0.5 ** (5 / 10), rel=1e-6)
    fresh_g, fresh_c = Clock("generator"), Clock("critic")
    gen2, critic2 = torch.nn.Linear(2, 1), torch.nn.Linear(1, 1)
    opt_g2 = torch.optim.RMSprop(gen2.parameters(), lr=5e-5)
    opt_c2 = torch.optim.RMSprop(critic2.parameters(), lr=5e-5)
    manager.restore(
        {"generator": fresh_g, "critic": fresh_c, "g": gen2, "c": critic2}
        | {"opt_g": opt_g2, "opt_c": opt_c2}
    )
    manager.close()
    assert (fresh_g.step, fresh_c.step) == (6, 30)
    assert np.array_equal(gen2.weight.detach().numpy(), gen.weight.detach().numpy())
    assert opt_c2.state_dict()["state"][0]["step"].item() == 30

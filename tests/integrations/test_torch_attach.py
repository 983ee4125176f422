"""Tests for globalstep.integrations.torch.attach: the step advanced by optimizer.step()."""

import math

import pytest

torch = pytest.importorskip("torch")

from globalstep import (  # noqa: E402
    Clock,
    ConfigError,
    StepError,
)
from globalstep.compat import torch as compat  # noqa: E402
from globalstep.integrations.torch import OneCycleMomentum, attach  # noqa: E402
from globalstep.schedules import ExponentialDecay  # noqa: E402


def _param(n=1):
    return torch.nn.Parameter(torch.zeros(n))


def _sgd_step(opt, params):
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()


@pytest.fixture
def released():
    """Detaches every attachment a test leaves attached."""
    made = []
    yield made
    for a in made:
        if a.attached:
            a.detach()


def test_update_k_uses_schedule_of_k(released):
    """Update number k moves an SGD parameter by exactly schedule(k) with a unit gradient."""
    w = _param()
    opt = torch.optim.SGD([w], lr=99.0)
    clock = Clock()
    sched = compat.StepLR(base_lr=0.5, step_size=3, gamma=0.5)
    released.append(attach(opt, clock, sched))
    moves = []
    for _ in range(7):
        before = w.item()
        _sgd_step(opt, [w])
        moves.append(before - w.item())
    assert moves == [sched(k) for k in range(7)]
    assert clock.step == 7


def test_skipped_scaler_update_does_not_tick(released):
    """An update the GradScaler skips leaves the clock, the rate and the optimizer's step."""
    w = _param(2)
    opt = torch.optim.AdamW([w], lr=1.0)
    clock = Clock()
    sched = ExponentialDecay(0.1, decay_steps=1, rate=0.5)
    released.append(attach(opt, clock, sched))
    scaler = torch.amp.GradScaler("cpu")
    rates = []
    for i in range(6):
        opt.zero_grad()
        scaler.scale((w * 2.0).sum()).backward()
        if i in (1, 2, 4):
            w.grad[0] = float("inf")
        scaler.step(opt)
        scaler.update()
        rates.append(opt.param_groups[0]["lr"])
    assert clock.step == 3
    assert int(opt.state[w]["step"].item()) == clock.step
    assert rates == [sched(0), sched(0), sched(0), sched(1), sched(1), sched(2)]


def test_fused_optimizer_skip_does_not_tick(released):
    """A fused Adam, which skips a scaler's inf update inside step(), does not tick either."""
    w = _param(2)
    opt = torch.optim.Adam([w], lr=0.1, fused=True)
    clock = Clock()
    released.append(attach(opt, clock))
    scaler = torch.amp.GradScaler("cpu")
    for i in range(4):
        opt.zero_grad()
        scaler.scale(w.sum()).backward()
        if i == 2:
            w.grad[1] = float("nan")
        scaler.step(opt)
        scaler.update()
    assert clock.step == 3
    assert int(opt.state[w]["step"].item()) == 3


def test_accumulation_ticks_once_per_step(released):
    """Four accumulated micro-batches per optimizer.step() tick the clock once."""
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = Clock()
    released.append(attach(opt, clock))
    for _ in range(5):
        for _ in range(4):
            model(torch.randn(2, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert clock.step == 5


def test_two_optimizers_two_clocks(released):
    """A critic updated 5 times per generator update advances its own clock 5 times as fast."""
    g, d = _param(), _param()
    opt_g, opt_d = torch.optim.SGD([g], lr=0.1), torch.optim.SGD([d], lr=0.1)
    gen, critic = Clock("generator"), Clock("critic")
    released += [attach(opt_g, gen), attach(opt_d, critic)]
    for _ in range(4):
        for _ in range(5):
            _sgd_step(opt_d, [d])
        _sgd_step(opt_g, [g])
    assert (gen.step, critic.step) == (4, 20)


def test_detach_removes_hooks_and_restores_groups(released):
    """After detach() the clock stops and each group's lr and betas are as before attach."""
    w = _param()
    opt = torch.optim.AdamW([w], lr=0.3, betas=(0.8, 0.99))
    clock = Clock()
    sched = compat.OneCycleLR(max_lr=1.0, total_steps=10)
    a = attach(opt, clock, sched, momentum=OneCycleMomentum(sched))
    _sgd_step(opt, [w])
    assert opt.param_groups[0]["lr"] != 0.3
    a.detach()
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["betas"]) == (0.3, (0.8, 0.99))
    _sgd_step(opt, [w])
    assert clock.step == 1
    assert not a.attached


def test_detach_twice_is_an_error():
    """A second detach() raises ConfigError."""
    opt = torch.optim.SGD([_param()], lr=0.1)
    a = attach(opt, Clock())
    a.detach()
    with pytest.raises(ConfigError, match="already detached"):
        a.detach()


def test_reattach_after_detach(released):
    """An optimizer can be attached again once detached."""
    opt = torch.optim.SGD([_param()], lr=0.1)
    attach(opt, Clock()).detach()
    released.append(attach(opt, Clock()))
    assert released[0].attached


def test_adopted_scheduler_matches_torch(released):
    """An adopted torch OneCycleLR gives the rates and momenta it gives when stepped by hand."""

    def run(adopt):
        w = _param()
        opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=20)
        clock = Clock()
        if adopt:
            released.append(attach(opt, clock, scheduler=sched))
        seen = []
        for _ in range(15):
            seen.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
            _sgd_step(opt, [w])
            if not adopt:
                sched.step()
        return seen, w.item()

    assert run(True) == run(False)


def test_adopted_scheduler_not_stepped_on_skip(released):
    """An adopted scheduler is not stepped for an update the GradScaler skipped."""
    w = _param()
    opt = torch.optim.SGD([w], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    clock = Clock()
    released.append(attach(opt, clock, scheduler=sched))
    scaler = torch.amp.GradScaler("cpu")
    for i in range(3):
        opt.zero_grad()
        scaler.scale(w.sum()).backward()
        if i == 1:
            w.grad[0] = float("inf")
        scaler.step(opt)
        scaler.update()
    assert (clock.step, sched.last_epoch) == (2, 2)


def test_per_group_schedules_and_none(released):
    """A list gives each group its own schedule; None leaves that group's lr alone."""
    a, b, c = _param(), _param(), _param()
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b]}, {"params": [c], "lr": 7.0}], lr=1.0)
    s1 = compat.ExponentialLR(base_lr=1.0, gamma=0.5)
    s2 = compat.ExponentialLR(base_lr=2.0, gamma=0.25)
    released.append(attach(opt, Clock(), [s1, s2, None]))
    _sgd_step(opt, [a, b, c])
    _sgd_step(opt, [a, b, c])
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5, 7.0]


def test_multipliers_scale_one_schedule(released):
    """One schedule with multipliers (0.1, 1) gives the groups 0.1 x and 1 x the rate."""
    a, b = _param(), _param()
    opt = torch.optim.SGD([{"params": [a]}, {"params": [b]}], lr=1.0)
    sched = compat.ExponentialLR(base_lr=1.0, gamma=0.5)
    released.append(attach(opt, Clock(), sched, multipliers=[0.1, 1]))
    for _ in range(3):
        _sgd_step(opt, [a, b])
    assert [g["lr"] for g in opt.param_groups] == [0.25 * 0.1, 0.25]


def test_momentum_parity_with_torch_one_cycle(released):
    """OneCycleMomentum through attach sets AdamW's beta1 as torch's OneCycleLR does."""
    kw = {"max_lr": 0.5, "total_steps": 30, "pct_start": 0.25, "three_phase": True}
    w1, w2 = _param(), _param()
    ours = torch.optim.AdamW([w1], lr=0.1)
    theirs = torch.optim.AdamW([w2], lr=0.1)
    sched = compat.OneCycleLR(**kw)
    released.append(attach(ours, Clock(), sched, momentum=OneCycleMomentum(sched)))
    ref = torch.optim.lr_scheduler.OneCycleLR(theirs, **kw)
    for _ in range(25):
        expected = (theirs.param_groups[0]["lr"], theirs.param_groups[0]["betas"][0])
        _sgd_step(ours, [w1])
        got = (ours.param_groups[0]["lr"], ours.param_groups[0]["betas"][0])
        assert math.isclose(got[0], expected[0], rel_tol=1e-12)
        assert math.isclose(got[1], expected[1], rel_tol=1e-12)
        _sgd_step(theirs, [w2])
        ref.step()


def test_schedule_carrying_momentum_is_used(released):
    """A schedule with a momentum(step) method sets SGD's momentum without momentum=."""

    class WithMomentum:
        def __call__(self, step):
            return 0.1

        def momentum(self, step):
            return 0.5 + step / 100

    w = _param()
    opt = torch.optim.SGD([w], lr=1.0, momentum=0.9)
    released.append(attach(opt, Clock(), WithMomentum()))
    _sgd_step(opt, [w])
    _sgd_step(opt, [w])
    assert opt.param_groups[0]["momentum"] == 0.51


def test_tensor_lr_filled_in_place(released):
    """A group whose lr is a tensor gets the rate written into that tensor."""
    w = _param()
    lr = torch.tensor(0.5)
    opt = torch.optim.Adam([w], lr=lr)
    released.append(attach(opt, Clock(), compat.ExponentialLR(base_lr=1.0, gamma=0.5)))
    _sgd_step(opt, [w])
    _sgd_step(opt, [w])
    assert opt.param_groups[0]["lr"] is lr
    assert lr.item() == 0.5


def test_duration_schedule_resolved_with_clock(released):
    """A schedule length in epochs is resolved with the clock's steps per epoch."""
    w = _param()
    opt = torch.optim.SGD([w], lr=1.0)
    clock = Clock(steps_per_epoch=2)
    released.append(attach(opt, clock, ExponentialDecay(1.0, "1ep", 0.5, staircase=True)))
    for _ in range(3):
        _sgd_step(opt, [w])
    assert opt.param_groups[0]["lr"] == 0.5


def test_schedule_past_its_end_raises_at_that_update(released):
    """A OneCycleLR read past total_steps raises StepError at the update past its end."""
    w = _param()
    opt = torch.optim.SGD([w], lr=1.0)
    released.append(attach(opt, Clock(), compat.OneCycleLR(max_lr=1.0, total_steps=3)))
    for _ in range(4):
        _sgd_step(opt, [w])
    with pytest.raises(StepError, match="total_steps=3"):
        _sgd_step(opt, [w])


def test_one_cycle_momentum_two_phase_values():
    """OneCycleMomentum falls from max to base over the warm-up and rises back after."""
    m = OneCycleMomentum(compat.OneCycleLR(max_lr=1.0, total_steps=10, pct_start=0.3))
    assert [m(0), m(2), m(9)] == pytest.approx([0.95, 0.85, 0.95], abs=1e-15)
    assert m(1) > m(2) < m(3)


def test_one_cycle_momentum_refuses_bad_input():
    """OneCycleMomentum refuses a non-one-cycle schedule, a momentum outside [0, 1], step -1."""
    with pytest.raises(ConfigError, match="one-cycle"):
        OneCycleMomentum(compat.StepLR(base_lr=1.0, step_size=2))
    sched = compat.OneCycleLR(max_lr=1.0, total_steps=10)
    with pytest.raises(ConfigError, match="base_momentum"):
        OneCycleMomentum(sched, base_momentum=1.5)
    with pytest.raises(StepError, match="step"):
        OneCycleMomentum(sched)(-1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"optimizer": "sgd"}, "`optimizer` must be a torch.optim.Optimizer"),
        ({"clock": 3}, "`clock` must be a globalstep.Clock"),
        ({"schedule": [None, None]}, "one entry per param group"),
        ({"schedule": 0.1}, "must be a schedule"),
        ({"multipliers": [1.0]}, "needs one shared schedule"),
        (
            {"schedule": compat.ExponentialLR(base_lr=1.0, gamma=0.5), "multipliers": [math.inf]},
            "finite",
        ),
        ({"momentum": compat.ExponentialLR(base_lr=1.0, gamma=0.5)}, "'momentum' or 'betas'"),
    ],
)
def test_attach_refuses_bad_arguments(kwargs, match):
    """attach() names the argument and the rule it broke."""
    opt = torch.optim.Adagrad([_param()], lr=0.1)
    args = {"optimizer": opt, "clock": Clock(), **kwargs}
    with pytest.raises(ConfigError, match=match):
        attach(args.pop("optimizer"), args.pop("clock"), **args)


def test_attach_twice_is_an_error(released):
    """An optimizer already attached is refused until detached."""
    opt = torch.optim.SGD([_param()], lr=0.1)
    released.append(attach(opt, Clock()))
    with pytest.raises(ConfigError, match="already attached"):
        attach(opt, Clock())


def test_one_clock_two_optimizers_is_an_error(released):
    """One clock advanced by two optimizers is refused, pointing to one clock each."""
    clock = Clock()
    released.append(attach(torch.optim.SGD([_param()], lr=0.1), clock))
    with pytest.raises(ConfigError, match="its own Clock"):
        attach(torch.optim.SGD([_param()], lr=0.1), clock)


def test_scheduler_with_schedule_is_an_error():
    """Adopting a torch scheduler and passing a schedule too is refused."""
    opt = torch.optim.SGD([_param()], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.raises(ConfigError, match="must come alone"):
        attach(opt, Clock(), compat.StepLR(base_lr=0.1, step_size=2), scheduler=sched)


def test_scheduler_of_another_optimizer_is_an_error():
    """A torch scheduler built on another optimizer is refused."""
    opt = torch.optim.SGD([_param()], lr=0.1)
    other = torch.optim.SGD([_param()], lr=0.1)
    with pytest.raises(ConfigError, match="built on this optimizer"):
        attach(opt, Clock(), scheduler=torch.optim.lr_scheduler.StepLR(other, 2))


def test_schedule_survives_optimizer_load_state_dict(released):
    """After optimizer.load_state_dict() (a restore) the hooks still set the rate."""
    w = _param()
    opt = torch.optim.SGD([w], lr=1.0)
    released.append(attach(opt, Clock(), compat.ExponentialLR(base_lr=1.0, gamma=0.5)))
    _sgd_step(opt, [w])
    opt.load_state_dict(opt.state_dict())
    _sgd_step(opt, [w])
    _sgd_step(opt, [w])
    assert opt.param_groups[0]["lr"] == 0.25


def test_attachment_dies_with_its_optimizer():
    """A dropped optimizer frees its clock for another optimizer."""
    import gc

    clock = Clock()
    attach(torch.optim.SGD([_param()], lr=0.1), clock)
    gc.collect()
    attach(torch.optim.SGD([_param()], lr=0.1), clock).detach()


def test_schedule_without_momentum_leaves_momentum(released):
    """A schedule whose has_momentum is False leaves the groups' momentum alone."""

    class NoMomentum:
        has_momentum = False

        def __call__(self, step):
            return 0.1

        def momentum(self, step):
            return None

    w = _param()
    opt = torch.optim.SGD([w], lr=1.0, momentum=0.9)
    released.append(attach(opt, Clock(), NoMomentum()))
    _sgd_step(opt, [w])
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]) == (0.1, 0.9)


# ------------------------------------------------------------------ one tick owner per clock


def _train_with_run(directory, *, attached):
    """30 updates of a Run-based torch loop, the rate set by attach() or by hand."""
    import io

    from globalstep import Run

    schedule = ExponentialDecay(0.1, decay_steps=5, rate=0.5, staircase=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    clock = Clock()
    attachment = attach(opt, clock, schedule) if attached else None
    run = Run(
        directory,
        total_steps=30,
        clock=clock,
        schedules={"lr": schedule},
        save_every=10,
        progress=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl",)},
    )
    updates = 0
    with run:
        run.restore({"model": model, "opt": opt})
        while not run.done:
            x = torch.linspace(-1.0, 1.0, 12).reshape(4, 3) * (1 + updates % 3)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if attachment is None:
                opt.param_groups[0]["lr"] = run.value("lr")
            opt.step()
            run.update(loss=loss.detach().item(), lr=opt.param_groups[0]["lr"])
            updates += 1
    if attachment is not None:
        attachment.detach()
    return run, updates, model


def test_attach_and_run_tick_once_per_update(tmp_path):
    """attach() owns the clock's tick, so Run.update beside it does not tick again: 30
    updates give step 30, the rates by step equal a plain run's, and each step 1..30 is
    logged once (the checkpoints at 10, 20, 30)."""
    from globalstep.summary import read_run

    run, updates, model = _train_with_run(tmp_path / "attached", attached=True)
    plain, plain_updates, plain_model = _train_with_run(tmp_path / "plain", attached=False)
    assert (run.step, updates) == (30, 30) == (plain.step, plain_updates)
    attached_log = read_run(tmp_path / "attached" / "logs").scalars
    plain_log = read_run(tmp_path / "plain" / "logs").scalars
    for tag in ("lr", "loss"):
        assert [p.step for p in attached_log[tag]] == list(range(1, 31)), tag
        assert [p.value for p in attached_log[tag]] == [p.value for p in plain_log[tag]], tag
    assert [p.value for p in attached_log["lr"]][:6] == [0.1] * 5 + [0.05]
    assert torch.equal(model.weight, plain_model.weight)
    assert run.checkpoints.steps() == [10, 20, 30]


def test_attach_claims_the_clock_until_detach():
    """attach() claims its clock's ticks; detach() gives them back; a clock claimed by
    another owner is refused."""
    clock = Clock()
    opt = torch.optim.SGD([_param()], lr=0.1)
    attachment = attach(opt, clock)
    assert "SGD" in (clock.tick_owner or "")
    attachment.detach()
    assert clock.tick_owner is None
    clock.claim_ticks("my loop")
    with pytest.raises(ConfigError, match="is ticked already by my loop"):
        attach(opt, clock)
    assert not opt._optimizer_step_post_hooks, "a refused attach() leaves no hook behind"


def test_skipped_update_beside_attach_keeps_its_meaning(tmp_path):
    """With attach(), run.update(applied=False) (a skipped update: no optimizer.step())
    is held for the next applied update, which is counted once and logs it at its step
    under skipped/loss, beside the count of skipped attempts: each step once per tag."""
    import io

    from globalstep import Run
    from globalstep.summary import read_run

    w = _param()
    opt = torch.optim.SGD([w], lr=0.1)
    clock = Clock()
    attachment = attach(opt, clock)
    with Run(
        tmp_path,
        clock=clock,
        progress=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"w": w})
        _sgd_step(opt, [w])
        run.update(loss=1.0)
        run.update(applied=False, loss=2.0)  # the scaler skipped this one
        run.update(loss=2.5)  # and this one (no optimizer.step(): the step did not move)
        _sgd_step(opt, [w])
        run.update(loss=3.0)
        assert run.step == 2
    attachment.detach()
    scalars = read_run(tmp_path / "logs").scalars
    assert [(p.step, p.value) for p in scalars["loss"]] == [(1, 1.0), (2, 3.0)]
    assert [(p.step, p.value) for p in scalars["skipped/loss"]] == [(2, 2.5)]
    assert [(p.step, p.value) for p in scalars["run/skipped_updates"]] == [(2, 2.0)]


# ------------------------------------------------ attach() written as a statement (issue 33)


def _statement_attach(opt, clock, schedule=None):
    """attach() as the README writes it: the result is not kept, and the collector runs."""
    import gc

    attach(opt, clock, schedule)
    gc.collect()


def test_attach_as_statement_keeps_its_claim(released):
    """attach() as a statement keeps the claim on the clock's ticks and the hooks together:
    after gc.collect() the clock's owner is still the attachment, and one optimizer.step()
    advances the step by exactly 1 at the schedule's rate."""
    from globalstep.integrations.torch import Attachment

    w = _param()
    opt = torch.optim.SGD([w], lr=9.0)
    clock = Clock()
    _statement_attach(opt, clock, compat.StepLR(base_lr=0.5, step_size=1, gamma=0.5))
    assert f"SGD at {id(opt):#x}" in (clock.tick_owner or "")
    _sgd_step(opt, [w])
    assert (clock.step, w.item()) == (1, -0.5)
    _sgd_step(opt, [w])
    assert (clock.step, w.item()) == (2, -0.75)
    attachment = Attachment.of(opt)
    assert attachment is not None
    assert attachment is Attachment.of(clock)
    assert clock.tick_owner == attachment.tick_owner
    released.append(attachment)


def test_second_attach_of_the_same_optimizer_names_the_first(released):
    """attach() of an optimizer attached by a statement (a notebook cell run twice) is
    refused with a message naming the first attachment and how to detach it; the
    optimizer keeps one pair of hooks, and one step advances the step by 1."""
    from globalstep.integrations.torch import Attachment

    w = _param()
    opt = torch.optim.SGD([w], lr=0.1)
    clock = Clock()
    _statement_attach(opt, clock, compat.ExponentialLR(base_lr=0.1, gamma=0.5))
    first = f"Attachment(SGD at {id(opt):#x}, Clock('global_step', step=0, epoch=0), attached)"
    with pytest.raises(ConfigError, match="is already attached, by ") as refused:
        attach(opt, clock)
    assert first in str(refused.value)
    assert "Attachment.of(optimizer).detach()" in str(refused.value)
    with pytest.raises(ConfigError, match="is already attached"):
        attach(opt, Clock())  # another clock: the optimizer is still the one attached
    assert (len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks)) == (1, 1)
    _sgd_step(opt, [w])
    assert clock.step == 1
    released.append(Attachment.of(opt))


def test_second_optimizer_on_the_same_clock_names_the_first(released):
    """attach() of another optimizer to a clock an optimizer attached by a statement
    ticks is refused with a message naming the first attachment; the second optimizer
    gets no hook."""
    from globalstep.integrations.torch import Attachment

    opt = torch.optim.SGD([_param()], lr=0.1)
    other = torch.optim.Adam([_param()], lr=0.1)
    clock = Clock()
    _statement_attach(opt, clock, compat.ExponentialLR(base_lr=0.1, gamma=0.5))
    with pytest.raises(ConfigError, match="is already advanced by another optimizer") as refused:
        attach(other, clock)
    assert f"by Attachment(SGD at {id(opt):#x}, Clock(" in str(refused.value)
    assert "Attachment.of(clock).detach()" in str(refused.value)
    assert not other._optimizer_step_pre_hooks
    assert not other._optimizer_step_post_hooks
    assert Attachment.of(other) is None
    released.append(Attachment.of(clock))


def test_detach_then_attach_again_after_a_statement(released):
    """The attachment of a statement, found again by Attachment.of, detaches (hooks and
    claim both gone), and the optimizer attaches again, one tick per step."""
    from globalstep.integrations.torch import Attachment

    w = _param()
    opt = torch.optim.SGD([w], lr=0.1)
    clock = Clock()
    _statement_attach(opt, clock)
    first = Attachment.of(clock)
    assert first is not None
    first.detach()
    assert (clock.tick_owner, Attachment.of(opt), Attachment.of(clock)) == (None, None, None)
    assert not opt._optimizer_step_pre_hooks
    assert not opt._optimizer_step_post_hooks
    _sgd_step(opt, [w])
    assert clock.step == 0
    released.append(attach(opt, clock))
    _sgd_step(opt, [w])
    assert clock.step == 1


def test_unreachable_attached_optimizer_does_not_block_its_clock(released):
    """An optimizer nothing reaches any more, not yet collected (its hooks and attachment
    form a cycle), does not block attaching another optimizer to its clock."""
    import gc

    clock = Clock()
    gc.disable()
    try:
        attach(torch.optim.SGD([_param()], lr=0.1), clock)
        w = _param()
        opt = torch.optim.SGD([w], lr=0.1)
        released.append(attach(opt, clock))
    finally:
        gc.enable()
    _sgd_step(opt, [w])
    assert clock.step == 1


def test_run_beside_attach_as_statement_ticks_once(tmp_path):
    """Beside a Run, attach() as a statement keeps the tick: run.update does not raise
    and the step advances exactly once per optimizer.step(), each step logged once."""
    import io

    from globalstep import Run
    from globalstep.integrations.torch import Attachment
    from globalstep.summary import read_run

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = Run(
        tmp_path,
        total_steps=6,
        save_every=3,
        progress=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl",)},
    )
    steps = []
    with run:
        _statement_attach(opt, run.clock, compat.StepLR(base_lr=0.1, step_size=2, gamma=0.5))
        run.restore({"model": model, "opt": opt})
        while not run.done:
            opt.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
            run.update(lr=opt.param_groups[0]["lr"])
            steps.append(run.step)
    Attachment.of(opt).detach()
    assert steps == [1, 2, 3, 4, 5, 6]
    points = read_run(tmp_path / "logs").scalars["lr"]
    assert [p.step for p in points] == [1, 2, 3, 4, 5, 6]
    assert [p.value for p in points] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    assert run.checkpoints.steps() == [3, 6]


def test_attachment_of_what_is_not_attached_is_none():
    """Attachment.of gives None for an optimizer or a clock no attachment holds, and for
    anything else."""
    from globalstep.integrations.torch import Attachment

    assert Attachment.of(torch.optim.SGD([_param()], lr=0.1)) is None
    assert Attachment.of(Clock()) is None
    assert Attachment.of("an optimizer") is None

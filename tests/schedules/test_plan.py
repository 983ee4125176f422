"""Tests for globalstep.schedules._plan: steps from data, and the plan's warnings."""

from __future__ import annotations

import pytest

from globalstep import ConfigError, ConversionError
from globalstep._cli import main
from globalstep.schedules import (
    Constant,
    CosineDecay,
    ExponentialDecay,
    InverseSqrt,
    InverseTimeDecay,
    NaturalExpDecay,
    OneCycle,
    PiecewiseConstant,
    Plan,
    WarmupStableDecay,
    join,
    warmup,
)

SEED = [
    "plan",
    "--dataset-size",
    "1200",
    "--batch-size",
    "100",
    "--epochs",
    "2000",
    "--schedule",
    "exponential_decay",
    "--initial",
    "0.1",
    "--decay-steps",
    "100000",
    "--rate",
    "0.96",
    "--staircase",
]
NEVER_DECAYS = (
    "decay_steps=100000 but the run has 24,000 steps: the value stays at its initial 0.1 for "
    "the whole run"
)


def test_seed_question_steps(capsys):
    """The seed run has 12 steps per epoch and 24,000 steps."""
    assert main(SEED) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["steps", "per", "epoch", "12"]
    assert lines[1].split() == ["total", "steps", "24,000"]


def test_seed_question_never_decays_warning(capsys):
    """The seed run warns that the staircase decay never fires."""
    assert main(SEED) == 0
    assert f"warning: {NEVER_DECAYS}" in capsys.readouterr().err.splitlines()


def test_plan_counts():
    """A plain plan divides rows by batch and multiplies by epochs."""
    plan = Plan(dataset_size=1200, batch_size=100, epochs=2000)
    assert (plan.steps_per_epoch, plan.total_steps, plan.samples) == (12, 24_000, 2_400_000)


def test_partial_batch_is_a_step():
    """A last partial batch is a step, unless drop_last."""
    assert Plan(1250, 100, 1).steps_per_epoch == 13
    assert Plan(1250, 100, 1, drop_last=True).steps_per_epoch == 12


def test_grad_accum_and_world_size_divide_the_steps():
    """Accumulation and processes each divide the updates per epoch."""
    plan = Plan(dataset_size=12_800, batch_size=16, epochs=1, grad_accum=4, world_size=8)
    assert (plan.steps_per_epoch, plan.samples_per_step) == (25, 512)


def test_plan_resolves_epoch_durations():
    """Durations in epochs and samples turn into this run's steps."""
    plan = Plan(dataset_size=1200, batch_size=100, epochs=10)
    assert (plan.steps("3ep"), plan.steps("1000sp")) == (36, 10)


def test_no_warning_for_a_fitting_schedule():
    """A cosine decay over exactly the run gives no warning."""
    plan = Plan(1200, 100, 10)
    assert plan.lint(CosineDecay(0.1, "10ep")) == []


def test_warmup_longer_than_the_run():
    """A warm-up as long as the run is reported."""
    plan = Plan(1200, 100, 1)
    assert "the warm-up of 100 steps is not shorter than the run's 12 steps" in " ".join(
        plan.lint(warmup(CosineDecay(0.1, 10), 100))
    )


def test_wsd_warmup_longer_than_the_run():
    """A WSD warm-up longer than the run is reported too."""
    plan = Plan(1200, 100, 1)
    lint = plan.lint(WarmupStableDecay(1.0, 200, warmup_steps=50, decay_steps=10))
    assert any("warm-up of 50 steps" in w for w in lint)


def test_schedule_that_ends_early():
    """A schedule ending at 60% of the run reports its constant tail."""
    plan = Plan(1000, 100, 10)
    assert plan.lint(CosineDecay(0.1, 60)) == [
        "the schedule ends at step 60: its final value 0 is used for the last 40 steps "
        "(40.0% of the run)"
    ]


def test_schedule_ending_at_the_last_step_is_on_time():
    """A decay that reaches its final value at the run's last step gives no warning; one
    step earlier leaves a 2-step tail, which is reported."""
    plan = Plan(1200, 100, 10)
    assert plan.lint(CosineDecay(0.1, 119)) == []
    assert plan.lint(CosineDecay(0.1, 118)) == [
        "the schedule ends at step 118: its final value 0 is used for the last 2 steps "
        "(1.7% of the run)"
    ]


def test_trigger_that_never_fires():
    """A trigger whose period passes the run's end is reported."""
    plan = Plan(1200, 100, 2000)
    assert plan.lint(triggers={"checkpoint": "30000st"}) == [
        "trigger 'checkpoint' every 30000st first fires at step 30,000, but the run has "
        "24,000 steps: it never fires"
    ]


def test_trigger_in_epochs_that_fires():
    """A trigger every 5 epochs fires within a 10-epoch run: no warning."""
    assert Plan(1200, 100, 10).lint(triggers={"eval": "5ep"}) == []


def test_wall_time_trigger_is_not_checked():
    """A wall-time trigger cannot be checked and gives no warning."""
    assert Plan(1200, 100, 10).lint(triggers={"save": "30min"}) == []


def test_piecewise_boundary_past_the_end():
    """A piecewise boundary past the run's end is reported."""
    plan = Plan(1200, 100, 10)
    lint = plan.lint(PiecewiseConstant((60, 500), (1.0, 0.1, 0.01)))
    assert lint == [
        "boundary 500 is at or past the run's end (120 steps): what follows it is never used"
    ]


def test_join_boundary_past_the_end():
    """A join boundary past the run's end is reported."""
    lint = Plan(1200, 100, 10).lint(join([Constant(1.0), Constant(0.1)], [1000]))
    assert any("boundary 1,000" in w for w in lint)


def test_nested_staircase_is_found():
    """A never-firing staircase inside a warm-up is still reported."""
    lr = warmup(ExponentialDecay(0.1, 100_000, 0.96, staircase=True), 10)
    assert any("decay_steps=100000" in w for w in Plan(1200, 100, 2000).lint(lr))


def test_plan_cli_reports_trigger(capsys):
    """`plan --every` reports a trigger that never fires."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "2"]
    assert main([*args, "--every", "5ep"]) == 0
    assert "it never fires" in capsys.readouterr().err


def test_plan_cli_fills_total_steps(capsys):
    """A one-cycle schedule without --total-steps gets the run's length."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "2"]
    assert main([*args, "--schedule", "one_cycle", "--peak", "1.0"]) == 0
    assert "total_steps=24" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "parameter", "value"),
    [
        ({"dataset_size": 0}, "dataset_size", "0"),
        ({"batch_size": -1}, "batch_size", "-1"),
        ({"epochs": 1.5}, "epochs", "1.5"),
        ({"grad_accum": 0}, "grad_accum", "0"),
        ({"world_size": True}, "world_size", "True"),
        ({"drop_last": "yes"}, "drop_last", "'yes'"),
        ({"batch_size": 2000, "drop_last": True}, "batch_size", "2000"),
    ],
    ids=["dataset", "batch", "epochs", "accum", "world", "drop_last", "no update"],
)
def test_invalid_plan(kwargs, parameter, value):
    """An invalid plan parameter names itself and the value received."""
    base = {"dataset_size": 1200, "batch_size": 100, "epochs": 1}
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}={value}"):
        Plan(**(base | kwargs))


def test_wall_time_duration_has_no_steps():
    """Converting wall time to steps is refused."""
    with pytest.raises(ConversionError, match="wall time"):
        Plan(1200, 100, 1).steps("30min")


def test_plan_cli_bad_value_exits_1(capsys):
    """A bad plan value exits 1 with the error."""
    args = ["plan", "--dataset-size", "0", "--batch-size", "100", "--epochs", "2"]
    assert main(args) == 1
    assert "`dataset_size` must be an int >= 1" in capsys.readouterr().err


def test_plan_cli_unknown_parameter_exits_1(capsys):
    """A parameter the schedule does not take exits 1 naming it."""
    args = ["plan", "--dataset-size", "10", "--batch-size", "1", "--epochs", "1"]
    assert main([*args, "--schedule", "constant", "--value", "1", "--rate", "2"]) == 1
    assert "not --rate" in capsys.readouterr().err


def test_plan_cli_missing_parameter_exits_1(capsys):
    """A schedule missing a required parameter exits 1 naming it."""
    args = ["plan", "--dataset-size", "10", "--batch-size", "1", "--epochs", "1"]
    assert main([*args, "--schedule", "cosine_decay", "--initial", "1"]) == 1
    assert "needs --decay-steps" in capsys.readouterr().err


def test_plan_cli_missing_required_is_usage_error():
    """Leaving out --epochs is a usage error (exit 2)."""
    assert main(["plan", "--dataset-size", "10", "--batch-size", "1"]) == 2


@pytest.mark.parametrize(
    "schedule",
    [
        NaturalExpDecay(0.1, 24_000, 0.5, staircase=True),
        InverseTimeDecay(0.1, 30_000, 0.5, staircase=True),
        ExponentialDecay(0.1, 1000, 0.5, staircase=True, begin=23_500),
    ],
    ids=["natural exp", "inverse time", "exponential with begin"],
)
def test_every_staircase_that_never_fires(schedule):
    """Each staircase decay whose first step down lies past the run's end is reported."""
    assert Plan(1200, 100, 2000).lint(schedule) == [
        f"decay_steps={schedule.decay_steps} but the run has 24,000 steps: the value stays at "
        "its initial 0.1 for the whole run"
    ]


@pytest.mark.parametrize(
    "schedule",
    [
        ExponentialDecay(0.1, 23_999, 0.96, staircase=True),
        ExponentialDecay(0.1, 100_000, 0.96),
        ExponentialDecay(0.1, 100_000, 1.0, staircase=True),
        NaturalExpDecay(0.1, 100_000, 0.0, staircase=True),
    ],
    ids=["fires at the last step", "continuous", "rate 1", "rate 0"],
)
def test_no_staircase_warning_when_it_fires_or_cannot(schedule):
    """A staircase that fires within the run, a continuous decay, and a rate that never
    changes the value give no never-decays warning."""
    assert not any("stays" in w for w in Plan(1200, 100, 2000).lint(schedule))


def test_staircase_after_a_warmup_counts_from_the_warmup_end():
    """A staircase behind a 100-step warm-up sees the run's steps after the warm-up only."""
    lr = warmup(ExponentialDecay(0.1, 23_950, 0.5, staircase=True), 100)
    assert Plan(1200, 100, 2000).lint(lr) == [
        "decay_steps=23950 but the exponential_decay part has 23,900 steps: the value stays "
        "at its initial 0.1 for the whole part"
    ]


def test_join_part_boundary_counts_from_the_part_start():
    """A piecewise part of a join is checked against the steps left after its start."""
    lr = join([Constant(1.0), PiecewiseConstant((50,), (1.0, 0.5))], [100])
    assert Plan(1200, 100, 10).lint(lr) == [
        "boundary 50 is at or past the piecewise_constant part's end (20 steps): what "
        "follows it is never used"
    ]


def test_inverse_sqrt_peak_on_the_last_step_is_reached():
    """An inverse-sqrt warm-up as long as the run peaks at its last step: no warning;
    one step longer never peaks."""
    plan = Plan(1200, 100, 1)
    assert plan.lint(InverseSqrt(1.0, 12)) == []
    assert plan.lint(InverseSqrt(1.0, 13)) == [
        "the warm-up of 13 steps is not shorter than the run's 12 steps: the rate never "
        "reaches its peak"
    ]


def test_one_cycle_peak_past_the_end():
    """A one-cycle schedule longer than the run whose peak is past its end is reported."""
    lint = Plan(1200, 100, 1).lint(OneCycle(1.0, 100))
    assert "the warm-up of 30 steps is not shorter than the run's 12 steps" in lint[0]


def test_plan_cli_prints_each_warning(capsys):
    """`plan` prints each lint warning on its own line."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "1"]
    argv = [*args, "--schedule", "warmup_stable_decay", "--peak", "1", "--warmup-steps", "20"]
    assert main([*argv, "--decay-steps", "5", "--total-steps", "40", "--every", "2ep"]) == 0
    out = capsys.readouterr().err.splitlines()
    assert [line for line in out if line.startswith("warning: ")] == [
        "warning: the warm-up of 20 steps is not shorter than the run's 12 steps: the rate "
        "never reaches its peak",
        "warning: a trigger every 2ep first fires at step 24, but the run has 12 steps: it "
        "never fires",
    ]


def test_plan_cli_accumulation_processes_and_drop_last(capsys):
    """`plan --grad-accum --world-size --drop-last` divides the updates and counts the
    samples actually used."""
    args = ["plan", "--dataset-size", "1250", "--batch-size", "100", "--epochs", "10"]
    assert main([*args, "--grad-accum", "3", "--world-size", "2", "--drop-last"]) == 0
    rows = [line.rsplit(maxsplit=1) for line in capsys.readouterr().out.splitlines()]
    assert rows == [
        ["steps per epoch", "2"],
        ["total steps", "20"],
        ["samples per step", "600"],
        ["samples", "12,000"],
    ]


def test_plan_names_a_schedule_it_cannot_resolve(capsys):
    """A length in tokens cannot be resolved by a plan, which knows no tokens per step."""
    argv = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "3"]
    schedule = ["--schedule", "cosine_decay", "--initial", "0.1", "--decay-steps", "1000tok"]
    assert main([*argv, *schedule]) == 1
    err = capsys.readouterr().err
    assert "`schedule` cannot be resolved" in err
    assert "needs `tokens_per_step`" in err


def _codes(plan, schedule=None, triggers=None):
    return [f.code for f in plan.findings(schedule, triggers)]


def test_cosine_decay_far_longer_than_the_run():
    """A cosine decay of 100,000 steps on a 36-step run is reported with where it stands."""
    lint = Plan(1200, 100, 3).lint(CosineDecay(0.1, 100_000))
    assert lint == [
        "the schedule reaches its final value 0 at step 100,000, but the run ends at step 35, "
        "where it is still at 0.1 (from 0.1 at step 0)"
    ]


def test_decay_given_in_epochs_longer_than_the_run():
    """A decay of 5 epochs on a 3-epoch run is a decay longer than the run."""
    assert _codes(Plan(1200, 100, 3), CosineDecay(0.1, "5ep")) == ["decay-longer-than-run"]


def test_decay_one_step_past_the_last_update_is_on_time():
    """decay_steps equal to the run's steps (final value right after the last update) fits."""
    assert _codes(Plan(1200, 100, 3), CosineDecay(0.1, 36)) == []


def test_continuous_decay_slower_than_the_run():
    """A continuous exponential decay with decay_steps past the run says how little it moves."""
    lint = Plan(1200, 100, 2000).lint(ExponentialDecay(0.1, 100_000, 0.96))
    assert lint == [
        "decay_steps=100000 is longer than the run's 24,000 steps: the value only goes from "
        "0.1 to 0.0990251 (-0.97%)"
    ]


def test_batch_larger_than_the_data_set():
    """A batch of 5,000 rows on 1,200 rows is reported."""
    assert Plan(1200, 5000, 3).lint() == [
        "batch_size=5,000 is larger than the 1,200 rows each process sees per epoch: every "
        "epoch is one partial batch"
    ]


def test_batch_larger_than_a_process_share():
    """With 4 processes, a batch larger than a quarter of the data is reported."""
    assert _codes(Plan(1200, 400, 3, world_size=4)) == ["batch-larger-than-data"]


def test_epoch_with_a_partial_batch():
    """1,250 rows in batches of 100 end each epoch with a batch of 50 rows."""
    assert Plan(1250, 100, 3).lint() == [
        "an epoch is 12.5 batches of 100 rows per process: its last 50 rows are a smaller batch"
    ]


def test_epoch_with_a_partial_batch_dropped():
    """With drop_last the partial batch is said to be dropped."""
    assert Plan(1250, 100, 3, drop_last=True).lint()[0].endswith("its last 50 rows are dropped")


def test_epoch_with_a_partial_accumulation_group():
    """13 micro-batches with grad_accum=2 end each epoch with a one-micro-batch update."""
    assert Plan(1300, 100, 3, grad_accum=2).lint() == [
        "an epoch is 13 micro-batches, not a multiple of grad_accum=2: its last micro-batch is "
        "an update of fewer micro-batches"
    ]


def test_whole_epochs_give_no_batching_finding():
    """1,200 rows, batch 100 and grad_accum 3 divide evenly: nothing to report."""
    assert Plan(1200, 100, 3, grad_accum=3).lint() == []


def test_schedule_that_never_changes_in_the_run():
    """A piecewise schedule whose levels are equal has no effect, and says so."""
    lr = PiecewiseConstant((10,), (0.1, 0.1))
    assert Plan(1200, 100, 3).lint(lr) == [
        "the value at the run's last step (35) equals the value at step 0 (0.1): the schedule "
        "has no effect"
    ]


def test_constant_schedule_is_not_reported_as_unchanged():
    """A constant schedule is meant to stay put."""
    assert Plan(1200, 100, 3).lint(Constant(0.1)) == []


def test_trigger_every_step():
    """A trigger of a hundredth of an epoch on 12-step epochs fires at every step."""
    assert Plan(1200, 100, 3).lint(triggers={"log": "0.01ep"}) == [
        "trigger 'log' every 0.01ep is at most one step in this run: it fires at every one of "
        "the 36 steps"
    ]


def test_trigger_period_zero_is_refused():
    """A trigger period of 0 steps is an error naming it."""
    with pytest.raises(ConfigError, match="must be a positive duration"):
        Plan(1200, 100, 3).trigger_steps("0st")


def test_token_trigger_needs_tokens_per_sample():
    """A token period without tokens per row is an error that names the option."""
    with pytest.raises(ConfigError, match="--tokens-per-sample"):
        Plan(1200, 100, 3).trigger_steps("2e9tok")


def test_token_trigger_with_tokens_per_sample():
    """With 512 tokens per row, 2e6 tokens are 40 steps of 100 rows."""
    assert Plan(1200, 100, 3, tokens_per_sample=512).trigger_steps("2e6tok") == 40


def test_wall_time_trigger_has_no_steps():
    """A wall-time period has no step count."""
    with pytest.raises(ConfigError, match="wall time"):
        Plan(1200, 100, 3).trigger_steps("30min")


def test_tokens_per_sample_must_be_positive():
    """tokens_per_sample=0 is refused."""
    with pytest.raises(ConfigError, match="tokens_per_sample"):
        Plan(1200, 100, 3, tokens_per_sample=0)


def test_plan_cli_warnings_go_to_stderr(capsys):
    """The plan goes to standard output and the warnings to standard error."""
    assert main(SEED) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.out
    assert captured.err.startswith("warning: decay_steps=100000")


def test_plan_cli_strict_exits_1_on_a_warning(capsys):
    """--strict makes a warning exit with status 1."""
    assert main([*SEED, "--strict"]) == 1


def test_plan_cli_strict_exits_0_without_warnings(capsys):
    """--strict on a plan that fits exits 0."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "3"]
    assert main([*args, "--strict"]) == 0


def test_plan_cli_json(capsys):
    """--json prints the plan, the schedule and the findings with their codes."""
    import json

    assert main([*SEED, "--json", "--every", "5ep"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["total_steps"] == 24_000
    assert data["schedule"]["value_at_last_step"] == 0.1
    assert data["triggers"] == [{"every": "5ep", "period_steps": 60, "fires": 400}]
    assert [f["code"] for f in data["findings"]] == ["staircase-never-decays"]


def test_plan_cli_prints_a_trigger_that_fits(capsys):
    """A trigger that fits the run is shown with its firings."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "30"]
    assert main([*args, "--every", "5ep"]) == 0
    assert "every 5ep         steps 60, 120, ... (6 times)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ("3 furlongs", "`--every` must be a duration"),
        ("0st", "`--every` must be a positive duration"),
        ("2e9tok", "give the tokens in one row (--tokens-per-sample)"),
    ],
)
def test_plan_cli_bad_trigger_is_one_error_line(capsys, every, message):
    """A bad --every prints one error line and no table."""
    args = ["plan", "--dataset-size", "1200", "--batch-size", "100", "--epochs", "3"]
    assert main([*args, "--every", every]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert message in captured.err

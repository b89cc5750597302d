"""The fused operators' pure planners from Python (GemmAllReduce.plan_for, GemmAllGather.plan_for):
no op, no GPU. They give the plan `weave plan gemm-ar|gemm-ag` prints and refuse bad input naming
the argument."""
import pytest

import weave


def test_all_reduce_plan_for_follows_m_and_the_machine():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    small, large = weave.GemmAllReduce.plan_for(1, **kw), weave.GemmAllReduce.plan_for(16384, **kw)
    assert small["mode"] != "fused" and large["mode"] == "fused", (small, large)
    assert large["tiles"] == 128 * 56 and large["grid"] == 132 and large["reason"]
    assert weave.GemmAllReduce.plan_for(16384, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    assert weave.GemmAllReduce.plan_for(16384, num_sms=66, **kw)["grid"] == 66


def test_all_gather_plan_for_follows_the_machine():
    kw = dict(n=2048, k=7168, m_max=8192, world=2)
    assert weave.GemmAllGather.plan_for(8192, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    p = weave.GemmAllGather.plan_for(8192, quant="ptpc", **kw)
    assert p["block_m"] == 128 and p["window_bytes"] > 0 and p["reason"]


@pytest.mark.parametrize("bad, needle", [
    (dict(m=0), "argument 'm'"),  # Python's own check, before the planner's
    (dict(m=16385), "'m' must be in 1..m_max"),
    (dict(m=2**20), "got 1048576"),
    (dict(m=8, num_sms=0), "num_sms"),
    (dict(m=8, world=0), "world"),
    (dict(m=2.5), "argument 'm'"),
])
def test_plan_for_refuses_bad_input_naming_it(bad, needle):
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    kw.update(bad)
    m = kw.pop("m")
    with pytest.raises(weave.ArgumentError, match=needle.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        weave.GemmAllReduce.plan_for(m, **kw)

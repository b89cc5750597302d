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


# GemmReduceScatter.plan_for: GemmAllReduce's planner without the gather leg. Rank r receives rows
# [r m/W, (r+1) m/W), so m must be a multiple of the world W, and fused's bands are whole 128-row
# tiles (m a multiple of W x 128).
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_reduce_scatter_plan_for_at_every_world(world):
    kw = dict(n=7168, k=2048, m_max=16384, world=world)
    p = weave.GemmReduceScatter.plan_for(16384, **kw)
    assert "bytes_ag" not in p and p["reason"]
    assert p["tiles"] == 128 * 56  # every rank computes a partial of every row
    assert p["bytes_rs"] == 16384 * 7168 * 2 * (world - 1) // world  # the peers' rows, bf16
    assert p["window_bytes"] == weave.GemmReduceScatter.window_bytes(**kw) > 0
    if world == 1:
        assert p["mode"] == "gemm-only" and "world 1" in p["reason"], p
    else:
        assert p["mode"] == "fused", p  # enough GEMM to hide the scatter under
        assert p["band_blocks"] == 128 // world and p["rounds"] == p["chunks"] + 1
    small = weave.GemmReduceScatter.plan_for(world, **kw)  # one row per rank
    assert small["mode"] == ("gemm-only" if world == 1 else "split-lsa"), small


def test_reduce_scatter_plan_for_modes_and_the_machine():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    for mode in ("gemm-only", "split-nccl", "split-lsa", "split-ce", "fused"):
        p = weave.GemmReduceScatter.plan_for(16384, mode=mode, **kw)
        assert p["mode"] == mode and f"mode {mode} requested" in p["reason"], p
    assert weave.GemmReduceScatter.plan_for(16384, nvlink_domain=False, **kw)["mode"] == "split-nccl"
    assert weave.GemmReduceScatter.plan_for(16384, num_sms=66, **kw)["grid"] == 66
    assert weave.GemmReduceScatter.plan_for(16384, mode=weave.GemmReduceScatterMode.SPLIT_CE, **kw)["mode"] == "split-ce"
    # The same numbers GemmAllReduce's planner gives, less the gather leg.
    ar = weave.GemmAllReduce.plan_for(16384, mode="split-lsa", **kw)
    rs = weave.GemmReduceScatter.plan_for(16384, mode="split-lsa", **kw)
    assert rs["bytes_rs"] == ar["bytes_rs"] and ar["bytes_ag"] == ar["bytes_rs"] and rs["tiles"] == ar["tiles"]
    assert rs["model_comm_us"] < ar["model_comm_us"]


def test_reduce_scatter_plan_for_says_why_fused_cannot_run():
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    m = 16384 - 2  # a multiple of the world, not of world x 128 = 256
    auto = weave.GemmReduceScatter.plan_for(m, **kw)
    assert auto["mode"] == "split-lsa", auto
    assert f"m = {m} is not a multiple of world x 128 = 256" in auto["reason"], auto["reason"]
    asked = weave.GemmReduceScatter.plan_for(m, mode="fused", **kw)
    assert asked["mode"] == "fused" and "cannot run m = 16382" in asked["reason"], asked["reason"]
    assert "world x 128 = 512" in weave.GemmReduceScatter.plan_for(16384 - 4, **dict(kw, world=4))["reason"]


@pytest.mark.parametrize("bad, needle", [
    (dict(m=3), "argument 'm' must be a multiple of the world (2), got 3"),
    (dict(m=6, world=4), "argument 'm' must be a multiple of the world (4), got 6"),
    (dict(m=0), "argument 'm'"),  # Python's own check, before the planner's
    (dict(m=16386), "'m' must be in 1..m_max"),
    (dict(m=8, num_sms=0), "num_sms"),
    (dict(m=8, world=0), "world"),
    (dict(m=8, mode="decode"), "argument 'mode': unknown mode 'decode' (one of: auto, gemm-only, split-nccl, "
                               "split-lsa, split-ce, fused)"),
    (dict(m=8, mode="fused-rs"), "argument 'mode': unknown mode 'fused-rs'"),
    (dict(m=8, m_max=1), "m_max must be >= the world (2)"),
    (dict(m=8, m_max=200, mode="fused"), "mode fused needs m_max >= world x 128 = 256"),
])
def test_reduce_scatter_plan_for_refuses_bad_input_naming_it(bad, needle):
    kw = dict(n=7168, k=2048, m_max=16384, world=2)
    kw.update(bad)
    m = kw.pop("m")
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmReduceScatter.plan_for(m, **kw)
    assert needle in str(e.value), str(e.value)

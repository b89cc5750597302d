"""A Hugging Face transformers Llama on weave. A Llama-architecture model with random weights is
built locally from a config (no download: by default 2 decoder layers of Llama-3-8B's shape,
hidden 4096, MLP 14336, 32 heads, 8 KV heads, vocab 32000; ~0.7 B parameters, bf16), cloned, and
the clone's projections swapped for weave's tensor-parallel layers (weave.hf.swap_to_weave:
q/k/v/gate/up column-parallel, o/down row-parallel on weave.GemmAllReduce). Both run a prefill and
greedy decode steps with HF's KV cache (the clone fed the unmodified model's tokens); the example
reports how closely the clone's logits follow the unmodified model's and the time per prefill and
per decode step of each (CUDA events, after warm-up, the median).

    python examples/python/llama_on_weave.py [--quant bf16|ptpc|blockscale|mxfp8]    # one GPU
    torchrun --nproc_per_node=2 examples/python/llama_on_weave.py [--quant ptpc]     # TP = 2

Under torchrun every rank builds the same model (rank 0's weights broadcast), runs the unmodified
model whole on its own GPU (the one-GPU baseline) and its shard of the weave clone; rank 0 prints.
Eagerly (HF's forward) a decode step of a few layers is bound by the host's kernel launches and each
layer's Python (the fp8 layers also quantise their activations per call, with torch ops), not by the
GEMMs; so the decode step is also timed replayed from a CUDA graph (one step at the prompt's length,
captured once, its logits checked against the eager step's), which is how serving engines run decode.

Tolerance (weave.hf.TOLERANCE: the logits' relative L2, and the largest |difference| over the
reference logits' rms): bf16 3e-2 and 0.25, where only rounding differs (weave's K split and bf16
partial sums against cuBLAS's order; measured ~1.1e-2 and 0.06). ptpc, blockscale and mxfp8 0.5 and
3.0: every weight and activation is rounded to e4m3 (3 mantissa bits, ~3.7% per GEMM, 7 GEMMs a
layer) and random weights carry each layer's error on undamped: measured 0.17-0.20 and ~1.0 x rms
for 2 layers at hidden 4096, 0.24-0.27 and 1.35 for 4 (all emulated on the CPU). A wrong shard or a
missing all-reduce gives a relative L2 above 1. Argmax agreement is reported, not bounded: random
weights give nearly tied top logits, which fp8's noise reorders.

Exit status: 0 when prefill and decode logits are within the tolerance (and each model's graph
replay within bf16's of its eager step; a capture that fails is reported, not failed), 1 when not,
77 ("skipped": it could not run, like the other examples) without a Hopper GPU, torch with CUDA or
transformers.
"""
from __future__ import annotations  # the torch annotations stay unevaluated where torch is missing

import argparse
import copy
import os
import statistics
import sys

import weave

try:
    import torch
    import torch.distributed as dist
except ImportError:  # skip_reason() says so
    torch = None
try:
    import transformers
except ImportError:
    transformers = None


def skip_reason() -> str:
    """'' when this machine can run the example, else why not (exit 77, like the other examples)."""
    if weave.no_gpu_reason():
        return weave.no_gpu_reason()
    if torch is None:
        return "this example needs PyTorch with CUDA (pip install torch)"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return "" if transformers is not None else "this example needs transformers (pip install transformers)"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quant", choices=("bf16", "ptpc", "blockscale", "mxfp8"), default="bf16",
                    help="weave's layers: bf16, ptpc (e4m3 per output feature / per token), blockscale (e4m3 per "
                         "128x128 weight block / per token and 128 features) or mxfp8 (e4m3 with power-of-two "
                         "scales per 32x32 weight block / per token and 32 features); the unmodified model stays bf16")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    ap.add_argument("--hidden", type=int, default=4096, help="hidden size (default 4096)")
    ap.add_argument("--intermediate", type=int, default=14336, help="MLP size (default 14336)")
    ap.add_argument("--heads", type=int, default=32, help="attention heads (default 32; divisible by the world)")
    ap.add_argument("--kv-heads", type=int, default=8, help="KV heads (default 8; divisible by the world)")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary (default 32000)")
    ap.add_argument("--batch", type=int, default=1, help="sequences per call (default 1)")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens per sequence: the prefill (default 512)")
    ap.add_argument("--decode-steps", type=int, default=8, help="greedy decode steps compared (default 8)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    ap.add_argument("--iters", type=int, default=20, help="timed calls; the median is reported (default 20)")
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="the row-parallel ops' m_max, the largest batch x tokens of one call "
                         "(default: batch x prompt)")
    ap.add_argument("--seed", type=int, default=0, help="weights and prompt (default 0)")
    return ap.parse_args()


def build_model(args, world: int):
    """The unmodified model: random weights from the seed, bf16 on this rank's GPU, rank 0's everywhere."""
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(2048, args.prompt + args.decode_steps + args.warmup + args.iters + 1))
    torch.manual_seed(args.seed)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).eval()
    if world > 1:  # the same initialisation runs everywhere; the broadcast makes "the same model" certain
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, 0)
    return model


def prefill_and_decode(model, ids, tokens=None, steps=0):
    """Logits of a prefill and one decode step per token (given, else the model's greedy choice)."""
    with torch.no_grad():
        out = model(ids, use_cache=True)
        logits, fed = [out.logits], []
        for i in range(len(tokens) if tokens is not None else steps):
            nxt = tokens[i] if tokens is not None else out.logits[:, -1:].argmax(-1)
            fed.append(nxt)
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits)
    return logits, fed


def median_ms(fn, warmup: int, iters: int, before=None) -> float:
    """The median of `iters` calls of fn between CUDA events, after `warmup` calls; `before()` runs
    ahead of each call, outside the timed span."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    events = []
    for _ in range(iters):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def times_ms(model, ids, token, args):
    """(ms per prefill, ms per decode step): a prefill with a fresh cache each call; a decode step
    of batch x 1 token after the prefilled cache, cut back to the prompt before each call, so every
    call attends to the same length (a cache growing call by call gives attention a new length
    each time, and torch's cuDNN attention builds a plan per new length: the model timed first
    would pay for those plans)."""
    with torch.no_grad():
        prefill = median_ms(lambda: model(ids, use_cache=True), args.warmup, args.iters)
        cache = model(ids, use_cache=True).past_key_values
        length = ids.shape[1]
        decode = median_ms(lambda: model(token, past_key_values=cache, use_cache=True), args.warmup, args.iters,
                           before=lambda: cut_to(cache, length))
    return prefill, decode


def cut_to(cache, length: int) -> None:
    """Drops the cache's tokens past `length` (crop(-n) removes n: transformers 5.17 deprecates
    crop(positive length), and 4.x takes both)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def graph_decode(model, ids, token, args):
    """(ms per decode step replayed from a CUDA graph, the replay's logits against the eager
    step's), or (None, why) where the capture failed. One step at the prompt's length is captured
    after warm-up on a side stream; every replay recomputes that step from the same cache."""
    try:
        with torch.no_grad():
            cache = model(ids, use_cache=True).past_key_values
            length = ids.shape[1]
            eager = model(token, past_key_values=cache, use_cache=True).logits.float()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(args.warmup):
                    cut_to(cache, length)
                    model(token, past_key_values=cache, use_cache=True)
            torch.cuda.current_stream().wait_stream(side)
            cut_to(cache, length)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(token, past_key_values=cache, use_cache=True)
            ms = median_ms(graph.replay, args.warmup, args.iters)
            return ms, weave.hf.logits_agreement(out.logits.float(), eager)
    except Exception as e:  # noqa: BLE001 (reported, the eager numbers stand)
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


def report(name: str, agree: dict) -> str:
    return (f"  {name:8s} rel L2 {agree['rel_l2']:.2e}   max |d| / rms {agree['max_abs_over_rms']:.3f}   "
            f"argmax agrees {100 * agree['argmax_agree']:.1f}%")


def main():
    args = parse_args()
    why = skip_reason()
    if why:
        print(f"GPU part skipped: {why}")
        return 77  # the usual "skipped" status, as the other examples
    import weave.hf

    torchrun = "RANK" in os.environ
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if torchrun:
        dist.init_process_group("nccl")
        comm = weave.Communicator.from_process_group()  # NCCL unique id broadcast over the group
    else:
        (comm,) = weave.Communicator.create_local([torch.cuda.current_device()])
    rank, world = comm.rank, comm.world_size
    say = print if rank == 0 else (lambda *a, **k: None)

    ref = build_model(args, world)
    model = copy.deepcopy(ref)
    plan = weave.hf.swap_to_weave(model, comm=comm, quant=args.quant,
                                  max_tokens=args.max_tokens or args.batch * args.prompt)
    ids = torch.randint(0, args.vocab, (args.batch, args.prompt), generator=torch.Generator().manual_seed(args.seed))
    ids = ids.cuda()
    say(f"llama_on_weave: {args.layers} layers, hidden {args.hidden}, MLP {args.intermediate}, {args.heads} heads "
        f"({args.kv_heads} KV), vocab {args.vocab}, bf16 weights, random (seed {args.seed}); batch {args.batch}, "
        f"prompt {args.prompt}, {args.decode_steps} decode steps")
    say(f"weave: {plan.describe()}")

    want, tokens = prefill_and_decode(ref, ids, steps=args.decode_steps)
    got, _ = prefill_and_decode(model, ids, tokens)
    agreement = {"prefill": weave.hf.logits_agreement(got[0], want[0])}
    if args.decode_steps:
        agreement["decode"] = weave.hf.logits_agreement(torch.cat(got[1:], 1), torch.cat(want[1:], 1))
    rel_l2, max_abs = weave.hf.TOLERANCE[args.quant]
    say(f"logits against the unmodified model (tolerance, {args.quant}: rel L2 <= {rel_l2:g}, "
        f"max |d| <= {max_abs:g} x rms):")
    for name, agree in agreement.items():
        say(report(name, agree))

    token = tokens[0] if tokens else ids[:, -1:]
    if world > 1:
        dist.barrier()
    base = times_ms(ref, ids, token, args)
    ours = times_ms(model, ids, token, args)
    graphs = [graph_decode(m, ids, token, args) for m in (ref, model)]
    say(f"time, median of {args.iters} (CUDA events; torch: the unmodified model on one GPU):")
    say(f"  {'':18s} {'torch, 1 GPU':>14s} {f'weave, TP={world} {args.quant}':>22s}   speedup")
    rows = [("prefill", base[0], ours[0]), ("decode step", base[1], ours[1])]
    if all(ms is not None for ms, _ in graphs):
        rows.append(("decode, CUDA graph", graphs[0][0], graphs[1][0]))
    for name, t_base, t_ours in rows:
        say(f"  {name:18s} {t_base:11.2f} ms {t_ours:19.2f} ms   {t_base / t_ours:6.2f}x")
    replay_bad = []
    for who, (ms, agree) in zip(("torch", "weave"), graphs):
        if ms is None:
            say(f"  {who}: no CUDA-graph decode ({agree})")
        else:
            say(f"  {who}: graph replay logits against its eager step: rel L2 {agree['rel_l2']:.2e}")
            if not weave.hf.within_tolerance(agree, "bf16"):
                replay_bad.append(f"{who}'s graph replay")

    bad = [name for name, agree in agreement.items() if not weave.hf.within_tolerance(agree, args.quant)]
    bad += replay_bad
    if bad:
        print(f"rank {rank}: FAILED: {' and '.join(bad)} logits outside the tolerance")
    else:
        say(f"ok: {' and '.join(agreement)} logits within the tolerance")
    if torchrun:
        dist.barrier()
        dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

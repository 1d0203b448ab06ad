#!/usr/bin/env python3
"""What orthojit.Muon's state file costs in host memory: a model of f32 CPU parameters (an R x 1024
AdamW embedding, --embedding-rows R, and L Muon matrices of 1024 x 1024, --muon-layers L, as
bench/checkpoint_memory.cpp), one step, then save_state and load_state of one file, against the
whole-state load that load_state was before it read tensor by tensor into the new state (every
tensor read into a host tensor, then load_state_dict's checks and its copy of each onto the
parameter's device). For each: the resident memory it added at its peak (VmHWM after the call,
reset through /proc/self/clear_refs before it, less VmRSS before) and the time, medians of
--repeats runs, in one process.

    MALLOC_MMAP_THRESHOLD_=1048576 PYTHONPATH=build/python /usr/bin/python3 bench/muon_checkpoint_memory.py \\
        [--embedding-rows R] [--muon-layers L] [--repeats N] [--path FILE]

MALLOC_MMAP_THRESHOLD_ makes glibc map every large block and unmap it when freed, so that the
resident memory measures what is live. On CPU tensors the streamed load holds the new state once
while it replaces the old; on CUDA tensors its host memory is one state tensor (the largest) where
the whole-state load held the whole state on the host.
"""
import argparse
import os
import statistics
import time
from collections import defaultdict

import torch

import orthojit
from orthojit import _orthojit
from orthojit.muon import _file_meta, _saved_groups

from resident_memory import reset_peak, status_kib  # bench/ is the script's folder

MIB = 1 << 20


def measure(call, repeats):
    added, seconds = [], []
    for _ in range(repeats):
        before = status_kib("VmRSS")
        reset_peak()
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
        added.append((status_kib("VmHWM") - before) / 1024)
    return statistics.median(added), statistics.median(seconds)


def whole_state_load(optimizer, path):
    """load_state as it was: every tensor of the file in a host tensor, then load_state_dict."""
    reader = _orthojit.StateFileReader(path)
    index_of = {name: index for group in _saved_groups(reader.metadata, optimizer.param_groups)
                for index, name in zip(group["params"], group["param_names"])}
    state = defaultdict(dict)
    dtypes = {"F32": torch.float32, "I64": torch.int64}
    for tensor_name, dtype, shape in reader.tensors:
        name, _, key = tensor_name.rpartition(".")
        value = torch.empty(shape, dtype=dtypes[dtype])
        reader.read(tensor_name, value.data_ptr(), value.numel() * value.element_size())
        state[index_of[name]][key] = value
    reader.verify_checksum()
    groups = _saved_groups(reader.metadata, optimizer.param_groups)
    optimizer.load_state_dict({"state": dict(state), "param_groups": groups, "orthojit": _file_meta(reader.metadata)})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedding-rows", type=int, default=32768)
    parser.add_argument("--muon-layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--path", default="/tmp/orthojit-muon-checkpoint-bench.safetensors")
    args = parser.parse_args()
    if args.embedding_rows < 1 or args.muon_layers < 0 or args.repeats < 1:
        parser.error("--embedding-rows must be >= 1, --muon-layers >= 0, --repeats >= 1")
    torch.manual_seed(0)
    shapes = {"embed.weight": (args.embedding_rows, 1024)}
    shapes.update({f"layer.{i}.weight": (1024, 1024) for i in range(args.muon_layers)})
    parameters = [(name, torch.nn.Parameter(torch.randn(*shape) * 0.02)) for name, shape in shapes.items()]
    for _, parameter in parameters:
        parameter.grad = torch.randn_like(parameter) * 1e-3
    optimizer = orthojit.Muon(parameters, use_muon={name: name != "embed.weight" for name in shapes}, preset="keller")
    optimizer.step()
    state_mib = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)) / MIB
    save = measure(lambda: optimizer.save_state(args.path), args.repeats)
    streamed = measure(lambda: optimizer.load_state(args.path), args.repeats)
    whole = measure(lambda: whole_state_load(optimizer, args.path), args.repeats)
    os.remove(args.path)
    elements = sum(p.numel() for _, p in parameters)
    print(f"{elements / 1e6:.1f}M f32 elements ({args.embedding_rows} AdamW rows + {args.muon_layers} Muon 1024^2), {state_mib:.1f} MiB of state, "
          f"CPU tensors; medians of {args.repeats}")
    print("call                     MiB added   s")
    print(f"save_state               {save[0]:9.1f}  {save[1]:5.2f}")
    print(f"load, whole state        {whole[0]:9.1f}  {whole[1]:5.2f}")
    print(f"load_state (streamed)    {streamed[0]:9.1f}  {streamed[1]:5.2f}")


if __name__ == "__main__":
    main()

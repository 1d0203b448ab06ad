#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, tests/fuzz/corpus/<target>/ (run from anywhere; the
files are kept in the repository, so this runs only when the seeds should change).

Seeds are the shipped files (kernels/programs/*.oj, examples/models/*.json), the malformed cases
of the tests (tests/parser_test.cpp's kMalformed, tests/deepspeed_config_test.cpp's errors), and
files in the formats the tools write (.npy as NumPy writes it, safetensors and optimizer states
as runtime/muon/safetensors_file.cpp writes them, tuning records, CUDA program-cache files from
a build's test cache when one is there). Each is small: libFuzzer mutates from them.
"""
import hashlib
import json
import pathlib
import re
import shutil
import struct

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def fresh(target):
    folder = CORPUS / target
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def c_string(literal):
    """The value of a C string literal's body (the escapes the tests use)."""
    return literal.encode().decode("unicode_escape")


def dsl():
    folder = fresh("dsl")
    for program in sorted((ROOT / "kernels" / "programs").glob("*.oj")):
        shutil.copy(program, folder / program.name)
    text = (ROOT / "tests" / "parser_test.cpp").read_text()
    for name, body in re.findall(r'\{"(\w+)", "((?:[^"\\]|\\.)*)"', text):
        (folder / f"malformed_{name}.oj").write_text(c_string(body))


def npy():
    folder = fresh("npy")
    rng = np.random.default_rng(7)
    np.save(folder / "f32_3x4.npy", rng.standard_normal((3, 4)).astype(np.float32))
    np.save(folder / "f64_2x5.npy", rng.standard_normal((2, 5)))
    np.save(folder / "batch_f32_2x2x3.npy", rng.standard_normal((2, 2, 3)).astype(np.float32))
    np.save(folder / "fortran_f32.npy", np.asfortranarray(rng.standard_normal((3, 2)).astype(np.float32)))
    np.save(folder / "int32.npy", np.arange(6, dtype=np.int32).reshape(2, 3))
    np.save(folder / "vector.npy", np.ones(4, dtype=np.float32))
    # Version 2.0 (a 4-byte header length), as NumPy writes a header too long for 1.0.
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
    header += b" " * ((64 - (12 + len(header) + 1) % 64) % 64) + b"\n"
    (folder / "v2_f32_2x2.npy").write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4))
    whole = (folder / "f32_3x4.npy").read_bytes()
    (folder / "truncated_data.npy").write_bytes(whole[:-5])


def safetensors_bytes(tensors, metadata, checksum=True):
    """The file runtime/muon/safetensors_file.cpp writes: tensors is [(name, dtype, shape, bytes)]."""
    buffer = b"".join(data for _, _, _, data in tensors)
    meta = dict(metadata)
    if checksum:
        meta["orthojit.sha256"] = hashlib.sha256(buffer).hexdigest()
    header = {"__metadata__": meta}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def safetensors():
    folder = fresh("safetensors")
    two = [("a", "F32", [2, 3], f32(range(6))), ("b", "I64", [], struct.pack("<q", 7)), ("c", "BF16", [2], b"\x80\x3f\x00\x40")]
    (folder / "three_tensors.safetensors").write_bytes(safetensors_bytes(two, {"note": "seed"}))
    (folder / "no_checksum.safetensors").write_bytes(safetensors_bytes(two, {}, checksum=False))
    (folder / "empty_tensor.safetensors").write_bytes(safetensors_bytes([("e", "F16", [0, 4], b""), ("f", "U8", [3], b"abc")], {}))
    good = safetensors_bytes(two, {})
    (folder / "bad_checksum.safetensors").write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    (folder / "truncated.safetensors").write_bytes(good[:-3])


def state():
    folder = fresh("state")
    weight = f32([0.5 * i for i in range(12)])
    tensors = [("layer.bias.exp_avg", "F32", [3], f32([1, 2, 3])), ("layer.bias.exp_avg_sq", "F32", [3], f32([4, 5, 6])),
               ("layer.bias.step", "I64", [], struct.pack("<q", 3)), ("layer.weight.momentum_buffer", "F32", [4, 3], weight)]
    base = {"orthojit.format": "hybrid-optimizer-state/2", "orthojit.preset": "keller", "orthojit.steps_taken": "3", "orthojit.momentum": "0.95"}
    (folder / "ema.safetensors").write_bytes(safetensors_bytes(tensors, {**base, "orthojit.momentum_kind": "ema"}))
    (folder / "sum.safetensors").write_bytes(safetensors_bytes(tensors, {**base, "orthojit.momentum_kind": "sum"}))
    format1 = {k: v for k, v in base.items() if k != "orthojit.momentum"}
    format1["orthojit.format"] = "hybrid-optimizer-state/1"
    (folder / "format1.safetensors").write_bytes(safetensors_bytes(tensors, format1))
    (folder / "missing_tensor.safetensors").write_bytes(safetensors_bytes(tensors[:3], {**base, "orthojit.momentum_kind": "ema"}))


def tuning_record():
    folder = fresh("tuning_record")
    fingerprint = {"backend": "cpu", "device": "AMD EPYC", "isa": "avx2", "cores": 2, "compiler": "LLVM 19.1.7", "orthojit": "0.1.0", "schema": 1}
    candidate = {"label": "standard blocked 64x256", "config": {"strategy": "standard", "engine": "jit"}, "status": "ok", "message": "",
                 "p20_ms": 1.0, "p50_ms": 1.1, "p80_ms": 1.3, "repeats": 5, "error": 1e-3}
    entry = {"program": "polar_express5", "program_hash": "ab" * 8, "rows": 64, "cols": 256, "batch": 1, "storage": "f32",
             "candidates": [candidate], "winner": candidate, "default_label": "standard", "default_p50_ms": 1.2, "vendor_p50_ms": None,
             "timestamp": "2026-12-01T01:02:03Z"}
    key = "program=" + "ab" * 8 + ";shape=64x256;batch=1;storage=f32;accumulate=f32"
    document = {"schema_version": 1, "fingerprint": fingerprint, "entries": {key: entry}}
    (folder / "one_entry.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    (folder / "empty.json").write_text(json.dumps({"schema_version": 1, "fingerprint": fingerprint, "entries": {}}, indent=2) + "\n")
    (folder / "schema_2.json").write_text(json.dumps({**document, "schema_version": 2}) + "\n")
    (folder / "truncated.json").write_text(json.dumps(document, indent=2)[:200])
    (folder / "entries_array.json").write_text(json.dumps({**document, "entries": [1, 2]}) + "\n")


def program_cache():
    folder = fresh("program_cache")
    # A payload as cuda/program_file.cpp writes it (length-prefixed fields), which the target also
    # frames as a whole file, and the files of a build's test cache, when present.
    def text(value):
        return struct.pack("<Q", len(value)) + value
    payload = text(b"sm_90") + text(b"\x7fELF cubin") + text(b"ptxas info    : Used 40 registers")
    payload += struct.pack("<Q", 1) + text(b"kernel_a") + b"".join(struct.pack("<q", v) for v in (40, 0, 0, 16, 4096))
    payload += struct.pack("<Q", 2) + text(b"--std=c++17") + text(b"-arch=sm_90")
    (folder / "payload_sm_90.bin").write_bytes(payload)
    key = b"a" * 64
    header = b"orthojit cuda program\n" + struct.pack("<Q", 1) + text(key) + text(b"sm_90") + struct.pack("<Q", len(payload))
    header += text(hashlib.sha256(payload).hexdigest().encode())
    (folder / "file_sm_90.ojbin").write_bytes(header + payload)
    for cached in sorted((ROOT / "build" / "test-cache" / "cuda").glob("*.ojbin"))[:3]:
        if cached.stat().st_size < 64 * 1024:
            shutil.copy(cached, folder / cached.name)


def deepspeed_config():
    folder = fresh("deepspeed_config")
    configs = {
        "blog": {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                 "optimizer": {"type": "Muon", "params": {"muon_lr": 1e-4, "adam_lr": 2e-6, "momentum": 0.95, "weight_decay": 0.1,
                                                          "betas": [0.9, 0.95], "eps": 1e-8}},
                 "bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "reduce_scatter": True, "allgather_bucket_size": 2e8, "overlap_comm": True},
                 "gradient_clipping": 1.0, "steps_per_print": 10, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}},
        "zero3_offload": {"optimizer": {"type": "muon"},
                          "zero_optimization": {"stage": 3, "reduce_scatter": False, "contiguous_gradients": False, "reduce_bucket_size": "auto",
                                                "stage3_prefetch_bucket_size": 1000, "param_persistence_threshold": 10,
                                                "stage3_gather_16bit_weights_on_model_save": True, "sub_group_size": 0,
                                                "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True, "buffer_count": 5},
                                                "offload_param": {"device": "cpu", "pin_memory": True}},
                          "bf16": {"enabled": "auto"}, "fp16": {"enabled": False, "loss_scale": 0}, "train_batch_size": "auto"},
        "extras": {"optimizer": {"type": "muon", "params": {"orthojit_preset": "moonlight", "ns_steps": 6, "lr_adjust": "spectral",
                                                             "momentum_kind": "ema", "backend": "ref", "nesterov": False, "experts_as_batch": True,
                                                             "tensor_layout": "trailing", "conv_scale": "matrix", "missing_grad": "skip"}}},
        "unknown_keys": {"optimizer": {"type": "muon", "params": {"lr": 0.01, "torch_adam": True}, "legacy_fusion": False},
                         "zero_optimization": {"stage": 2, "stgae": 2, "offload_optimizer": {"device": "cpu", "pinned": True}}},
        "bad_lr_type": {"optimizer": {"type": "muon", "params": {"lr": "0.1"}}},
        "bad_stage": {"optimizer": {"type": "muon"}, "zero_optimization": {"stage": 4}},
        "batch_mismatch": {"optimizer": {"type": "muon"}, "train_batch_size": 30, "train_micro_batch_size_per_gpu": 4},
        "adamw": {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}},
    }
    for name, config in configs.items():
        (folder / f"{name}.json").write_text(json.dumps(config, indent=1) + "\n")
    (folder / "trailing_comma.json").write_text('{"optimizer": {"type": "muon", "params": {"lr": 0.03,}}')


def model_config():
    folder = fresh("model_config")
    for model in sorted((ROOT / "examples" / "models").glob("*.json")):
        shutil.copy(model, folder / model.name)
    llama = json.loads((ROOT / "examples" / "models" / "llama-3-8b.json").read_text())
    del llama["hidden_size"]
    (folder / "llama_without_hidden_size.json").write_text(json.dumps(llama))
    mixtral = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_hidden_layers": 2, "vocab_size": 100, "num_local_experts": 4}
    (folder / "mixtral_small.json").write_text(json.dumps(mixtral))


if __name__ == "__main__":
    for make in (dsl, npy, safetensors, state, tuning_record, program_cache, deepspeed_config, model_config):
        make()
    for folder in sorted(CORPUS.iterdir()):
        print(f"{folder.name}: {len(list(folder.iterdir()))} seeds, {sum(f.stat().st_size for f in folder.iterdir())} bytes")

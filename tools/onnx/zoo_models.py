"""zoo_models.py — the model zoo behind tools/zoo and tests/onnx/zoo_subset.py.

Builds a model (torchvision classification, segmentation and video models with seeded random
weights, or the transformers defined here: a BERT-base-sized encoder, a GPT-2-small-sized causal
decoder), exports it to ONNX with PyTorch, converts it with convert.convert_file, runs dlrun on
the result and compares dlrun's output with PyTorch's eval() output in float64: relative L2 error
and whether the top-1 class (argmax over the last axis for sequences, over channels per pixel for
segmentation) is the same everywhere. Needs python3-torch, python3-torchvision, python3-onnx.
"""
import math
import os
import subprocess
import time

import numpy as np
import torch
import torchvision

import convert

# ---- the transformers ----


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention spelled out (q/k/v from one linear, scaled dot product, an
    optional additive mask), as GPT-2 writes it."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        if mask is not None:
            s = s + mask
        y = torch.softmax(s, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class DecoderBlock(torch.nn.Module):
    """GPT-2's block: pre-LayerNorm causal attention and a GELU MLP, both residual."""

    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = torch.nn.LayerNorm(d), SelfAttention(d, heads), torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class GPT(torch.nn.Module):
    """A GPT-2-style causal decoder; embed=False takes the embedded sequence [B, T, d] as input."""

    def __init__(self, layers=12, d=768, heads=12, seq=128, vocab=50257, embed=True):
        super().__init__()
        self.embed = embed
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(DecoderBlock(d, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, x):
        if self.embed:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.ln_f(x))


class BertEncoder(torch.nn.Module):
    """A BERT-style encoder: nn.TransformerEncoder (post-LayerNorm, GELU), with or without the
    word/position embeddings and their LayerNorm (embed=False takes [B, T, d])."""

    def __init__(self, layers=12, d=768, heads=12, seq=128, vocab=30522, embed=True):
        super().__init__()
        self.embed = embed
        self.words, self.pos, self.ln = torch.nn.Embedding(vocab, d), torch.nn.Embedding(seq, d), torch.nn.LayerNorm(d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=False)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        if self.embed:
            x = self.ln(self.words(x) + self.pos(torch.arange(x.shape[1])))
        return self.encoder(x.transpose(0, 1)).transpose(0, 1)


def _seq_input(d, seq, vocab, embed):
    def make(size, gen):
        if embed:
            return torch.randint(0, vocab, (1, seq), generator=gen)
        return torch.randn(1, seq, d, generator=gen)
    return make


TRANSFORMERS = {
    # name: (builder, input maker, what is compared)
    "bert-encoder": (lambda: BertEncoder(), _seq_input(768, 128, 30522, True)),
    "bert-encoder-noembed": (lambda: BertEncoder(embed=False), _seq_input(768, 128, 30522, False)),
    "gpt2-decoder": (lambda: GPT(), _seq_input(768, 128, 50257, True)),
    "gpt2-decoder-noembed": (lambda: GPT(embed=False), _seq_input(768, 128, 50257, False)),
    "tiny-encoder": (lambda: BertEncoder(layers=2, d=64, heads=4, seq=16, vocab=100, embed=False),
                     _seq_input(64, 16, 100, False)),
    "tiny-decoder": (lambda: GPT(layers=2, d=64, heads=4, seq=16, vocab=100, embed=False), _seq_input(64, 16, 100, False)),
    "tiny-encoder-ids": (lambda: BertEncoder(layers=2, d=64, heads=4, seq=16, vocab=100), _seq_input(64, 16, 100, True)),
    "tiny-decoder-ids": (lambda: GPT(layers=2, d=64, heads=4, seq=16, vocab=100), _seq_input(64, 16, 100, True)),
}

# ---- torchvision ----


def torchvision_models():
    """name -> family ("classification", "segmentation", "video") of every torchvision model the
    zoo tries (detection, optical flow and quantized models are not in it)."""
    lm = torchvision.models.list_models
    out = {n: "classification" for n in lm(module=torchvision.models)}
    out.update({n: "segmentation" for n in lm(module=torchvision.models.segmentation)})
    out.update({n: "video" for n in lm(module=torchvision.models.video)})
    return out


def default_size(name, family):
    if family == "video":
        return 112 if name in ("r3d_18", "mc3_18", "r2plus1d_18") else 224
    if name in TRANSFORMERS:
        return 0
    return 224


def all_models():
    names = dict(torchvision_models())
    names.update({n: "transformer" for n in TRANSFORMERS})
    return names


def randomise_norms(model):
    """Batchnorm statistics and affine parameters drawn away from 1/0 so that they matter; a
    linear layer initialised to zeros (ViT's head) gets random weights, or the output is all 0."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0, 0.02)
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)


class OutOnly(torch.nn.Module):
    """Segmentation models return a dict; this returns its "out"."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def build(name, family, size, seed=0):
    """(eval model, example input) for one zoo entry, seeded."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if family == "transformer":
        make, inp = TRANSFORMERS[name]
        return make().eval(), inp(size, gen)
    kw = {"weights": None}
    if name.startswith("vit_"):
        kw["image_size"] = size
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    if family == "segmentation":
        kw["weights_backbone"] = None
    model = torchvision.models.get_model(name, **kw)
    randomise_norms(model)
    if family == "segmentation":
        model = OutOnly(model)
    shape = (1, 3, 16, size, size) if family == "video" else (1, 3, size, size)
    return model.eval(), torch.randn(*shape, generator=gen)


# ---- one run ----


class Result:
    def __init__(self, name, size):
        self.name, self.size = name, size
        self.stage, self.error = "", ""   # stage that failed ("export", "convert", "run"); its message
        self.rel_l2, self.top1, self.seconds, self.ops = None, None, 0.0, []
        self.check = None                 # with check=BACKEND: dlrun check's last line; check_ok its verdict
        self.check_ok = True

    @property
    def ok(self):
        return not self.stage


def first_line(text):
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def last_line(text):
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


def top1_agreement(got, want, family):
    """Fraction of positions whose argmax agrees: per item (classification), per pixel over the
    channels (segmentation), per position over the vocabulary / features (sequences)."""
    axis = 1 if family == "segmentation" else -1
    return float((got.argmax(axis) == want.argmax(axis)).mean())


def run_model(name, family, size, workdir, dlrun, opset=13, seed=0, threads=None, backend=None, timeout=1800,
              check=None):
    """Exports, converts, runs and compares one model; a Result (never raises for the model's sake).
    With check=BACKEND, `dlrun check MODEL --backend BACKEND` also runs on the converted model (every op
    on BACKEND against the cpu reference, then end to end)."""
    r = Result(name, size)
    t0 = time.time()
    try:
        model, x = build(name, family, size, seed)
        with torch.no_grad():
            want = model(x).numpy().astype(np.float64)
    except Exception as e:  # noqa: BLE001  a model PyTorch cannot build or run at this size
        r.stage, r.error = "build", first_line(f"{type(e).__name__}: {e}")
        return r
    onnx_path, yaml = os.path.join(workdir, name + ".onnx"), os.path.join(workdir, name + ".yaml")
    try:
        # with gradients on, PyTorch 1.13's MultiheadAttention and TransformerEncoderLayer take their
        # plain path, which exports; under no_grad they take the fused "fast path", which does not
        torch.onnx.export(model, x, onnx_path, opset_version=opset, input_names=["input"], output_names=["output"])
    except Exception as e:  # noqa: BLE001
        r.stage, r.error = "export", first_line(f"{type(e).__name__}: {e}")
        r.seconds = time.time() - t0
        return r
    try:
        info = convert.convert_file(onnx_path, yaml)
    except convert.ConvertError as e:
        r.stage, r.error, r.seconds = "convert", first_line(e), time.time() - t0
        return r
    finally:
        del model
    r.ops = ops_of(yaml)
    x_path, y_path = os.path.join(workdir, name + ".x.npy"), os.path.join(workdir, name + ".y.npy")
    np.save(x_path, x.numpy().astype(np.int64 if info["input_dtypes"][0] == "int64" else np.float32))
    cmd = [dlrun, yaml, "--input", f"{info['inputs'][0]}={x_path}", "--output", f"{info['outputs'][0]}={y_path}"]
    if threads:
        cmd += ["--threads", str(threads)]
    if backend:
        cmd += ["--backend", backend]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r.stage, r.error, r.seconds = "run", f"dlrun: no result after {timeout} s", time.time() - t0
        return r
    r.seconds = time.time() - t0
    if p.returncode != 0:
        r.stage, r.error = "run", last_line(p.stderr or p.stdout)
        return r
    got = np.load(y_path).astype(np.float64)
    if check:
        run_check(r, dlrun, yaml, check, threads, timeout)
    for path in (onnx_path, yaml, yaml[:-5] + ".safetensors", x_path, y_path):
        if os.path.exists(path):
            os.remove(path)
    if got.size != want.size:
        r.stage, r.error = "compare", f"dlrun's output is {list(got.shape)}, PyTorch's {list(want.shape)}"
        return r
    got = got.reshape(want.shape)
    r.rel_l2 = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300))
    r.top1 = top1_agreement(got, want, family)
    return r


def run_check(r, dlrun, yaml, backend, threads, timeout):
    cmd = [dlrun, "check", yaml, "--backend", backend] + (["--threads", str(threads)] if threads else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        r.check, r.check_ok = f"no result after {timeout} s", False
        return
    r.check, r.check_ok = last_line(p.stdout if p.returncode == 0 else (p.stdout + p.stderr)), p.returncode == 0


def ops_of(yaml_path):
    """The dlrun ops a converted model uses (read from its layer lines)."""
    ops = set()
    with open(yaml_path) as f:
        for line in f:
            if ", op: " in line:
                ops.add(line.split(", op: ", 1)[1].split(",", 1)[0].strip())
    return sorted(ops)

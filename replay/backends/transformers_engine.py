"""``transformers``: an in-process engine, a small Llama-style model with random weights.

It exists so a wall-clock replay on a real engine runs anywhere, a GPU machine without a model
download included: the model is built from a config (``TinyLlamaConfig``) with seeded random
weights, and the tokenizer is built locally (a word-level vocabulary holding ``PROMPT_WORDS``), so
nothing is fetched from a hub. Generation is batched: one engine thread takes every request
waiting (up to ``max_batch``), left-pads them into one batch and decodes greedily; a stopping
criterion ends each sequence at its own forced length (EOS never ends one), reports its first
token and its completion at the decode step they happen, and drops cancelled ones. Requests that
arrive while a batch runs wait for the next (static batching). CUDA when available, else CPU.

Its latencies are those of a toy model on your hardware, not of your policy: real fidelity comes
from your own engine through the ``openai`` backend.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolloutscope.replay.backends.base import (
    PROMPT_WORDS,
    BackendError,
    BackendInfo,
    EngineExtraMissing,
    EngineFailure,
    EngineUnreachable,
    GenerationRequest,
    GenerationResult,
    OnFirstToken,
    OnResult,
    prompt_text,
)

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


def require_engine() -> tuple[Any, Any]:
    """``(torch, transformers)``, or ``EngineExtraMissing`` naming the extra."""
    try:
        import torch
    except ImportError:
        raise EngineExtraMissing("transformers", "torch") from None
    try:
        import transformers
    except ImportError:
        raise EngineExtraMissing("transformers", "transformers") from None
    return torch, transformers


@dataclass(frozen=True, kw_only=True)
class TinyLlamaConfig:
    """The model the backend builds; the defaults are CPU-sized (a few hundred thousand
    parameters). ``max_positions`` must hold the longest prompt plus its completion."""

    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 8192
    seed: int = 0

    def llama_config(self) -> Any:
        _, transformers = require_engine()
        return transformers.LlamaConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.layers,
            num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.max_positions, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, tie_word_embeddings=True)


def build_tokenizer(vocab_size: int) -> Any:
    """A word-level tokenizer built here: the special tokens, ``PROMPT_WORDS``, then fillers."""
    require_engine()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(SPECIAL_TOKENS) + list(PROMPT_WORDS)
    if vocab_size < len(words):
        raise BackendError(f"vocab_size must be at least {len(words)}")
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")
    fast.padding_side = "left"
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return fast


def build_model(config: TinyLlamaConfig) -> Any:
    torch, transformers = require_engine()
    torch.manual_seed(config.seed)
    return transformers.LlamaForCausalLM(config.llama_config()).eval()


def save_model(path: str | Path, config: TinyLlamaConfig = TinyLlamaConfig()) -> Path:
    """Write the model and tokenizer to ``path``, for a server to load (``transformers serve
    PATH``): the same engine behind the ``openai`` backend."""
    out = Path(path)
    build_model(config).save_pretrained(out)
    build_tokenizer(config.vocab_size).save_pretrained(out)
    return out


class _Entry:
    __slots__ = ("request", "on_first_token", "on_result", "t0", "cancelled", "first_sent")

    def __init__(self, request: GenerationRequest, on_first_token: OnFirstToken,
                 on_result: OnResult) -> None:
        self.request = request
        self.on_first_token = on_first_token
        self.on_result = on_result
        self.t0 = time.monotonic()
        self.cancelled = False
        self.first_sent = False

    def cancel(self) -> None:
        self.cancelled = True


_STOP = object()


class TransformersBackend:
    name = "transformers"

    def __init__(self, *, device: str | None = None,
                 config: TinyLlamaConfig = TinyLlamaConfig(), max_batch: int = 256,
                 dtype: str | None = None) -> None:
        if max_batch < 1:
            raise BackendError("max_batch must be at least 1")
        self.requested_device = device
        self.config = config
        self.max_batch = max_batch
        self.dtype_name = dtype
        self.device: str | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._unreachable: set[int] = set()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.batches = 0
        self.largest_batch = 0
        self._model: Any = None
        self._tok: Any = None
        self._torch: Any = None

    def start(self) -> BackendInfo:
        torch, transformers = require_engine()
        self._torch = torch
        device = self.requested_device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError("--device cuda: torch sees no CUDA device here "
                               f"(torch {torch.__version__}, built for CUDA "
                               f"{torch.version.cuda or 'none'})")
        self.device = device
        dtype_name = self.dtype_name or ("bfloat16" if device.startswith("cuda") else "float32")
        self._tok = build_tokenizer(self.config.vocab_size)
        self._model = build_model(self.config).to(device=device,
                                                   dtype=getattr(torch, dtype_name))
        self._generate([], warm_up=True)
        self._thread = threading.Thread(target=self._loop, name="rolloutscope-transformers",
                                        daemon=True)
        self._thread.start()
        engine = {"torch": torch.__version__, "transformers": transformers.__version__,
                  "dtype": dtype_name, "max_batch": str(self.max_batch)}
        if device.startswith("cuda"):
            engine["cuda"] = str(torch.version.cuda)
            engine["gpu"] = torch.cuda.get_device_name(torch.device(device))
        params = sum(p.numel() for p in self._model.parameters())
        return BackendInfo(backend=self.name, device=device, engine=engine,
                           model=(f"random Llama, {self.config.layers} layers x "
                                  f"{self.config.hidden_size}, {params:,} parameters"))

    def submit(self, request: GenerationRequest, on_first_token: OnFirstToken,
               on_result: OnResult) -> _Entry:
        entry = _Entry(request, on_first_token, on_result)
        self._queue.put(entry)
        return entry

    def set_reachable(self, shard: int, reachable: bool) -> None:
        if reachable:
            self._unreachable.discard(shard)
        else:
            self._unreachable.add(shard)

    def close(self) -> None:
        if self._thread is None:
            return
        self._closing = True
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    # -- the engine thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while len(batch) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)
                    break
                batch.append(more)
            live = []
            for entry in batch:
                if entry.cancelled:
                    continue
                shard = entry.request.shard
                if shard is not None and shard in self._unreachable:
                    entry.on_result(GenerationResult(
                        request=entry.request, latency_s=time.monotonic() - entry.t0,
                        error=EngineUnreachable(f"shard {shard}: the engine was killed by "
                                                f"the replay")))
                else:
                    live.append(entry)
            if live:
                self._generate(live)

    def _generate(self, entries: list[_Entry], warm_up: bool = False) -> None:
        torch = self._torch
        if warm_up:
            prompts = ["the of and"]
            lengths = [2]
        else:
            prompts = [prompt_text(e.request.call_id, e.request.input_tokens) for e in entries]
            lengths = [max(e.request.output_tokens, 1) for e in entries]
        enc = self._tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompt_len = enc["input_ids"].shape[1]
        if prompt_len + max(lengths) > self.config.max_positions:
            self._fail(entries, EngineFailure(
                f"prompt {prompt_len} + completion {max(lengths)} tokens exceed the model's "
                f"{self.config.max_positions} positions"))
            return
        enc = {k: v.to(self.device) for k, v in enc.items()}
        self.batches += 0 if warm_up else 1
        self.largest_batch = max(self.largest_batch, len(entries))
        stop = _PerSequenceStop(self, entries, prompt_len, lengths, warm_up)
        stop.prompt_tokens = [int(n) for n in enc["attention_mask"].sum(dim=1).tolist()]
        from transformers import StoppingCriteriaList

        try:
            with torch.inference_mode():
                self._model.generate(
                    **enc, max_new_tokens=max(lengths), do_sample=False, eos_token_id=None,
                    pad_token_id=self._tok.pad_token_id,
                    stopping_criteria=StoppingCriteriaList([stop]))
        except Exception as exc:  # the engine's failure is the calls' answer, not a crash
            self._fail([e for i, e in enumerate(entries) if not stop.done[i]],
                       EngineFailure(f"{type(exc).__name__}: {exc}"))
            if warm_up:
                raise BackendError(f"the transformers engine failed to warm up: {exc}") from exc

    def _fail(self, entries: list[_Entry], error: EngineFailure) -> None:
        now = time.monotonic()
        for e in entries:
            if not e.cancelled:
                e.on_result(GenerationResult(request=e.request, latency_s=now - e.t0,
                                             error=error))


class _PerSequenceStop:
    """A stopping criterion that ends each sequence at its own length and reports it."""

    def __init__(self, backend: TransformersBackend, entries: list[_Entry], prompt_len: int,
                 lengths: list[int], warm_up: bool) -> None:
        self.backend = backend
        self.entries = entries
        self.prompt_len = prompt_len
        self.lengths = lengths
        self.warm_up = warm_up
        self.done = [False] * len(lengths)
        self.prompt_tokens: list[int] = []

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        torch = self.backend._torch
        generated = input_ids.shape[1] - self.prompt_len
        now = time.monotonic()
        closing = self.backend._closing
        for i, want in enumerate(self.lengths):
            if self.done[i]:
                continue
            if self.warm_up:
                self.done[i] = generated >= want
                continue
            entry = self.entries[i]
            if entry.cancelled or closing:
                self.done[i] = True
                continue
            if not entry.first_sent and entry.request.stream:
                entry.first_sent = True
                entry.on_first_token(now - entry.t0)
            if generated >= want:
                self.done[i] = True
                entry.on_result(GenerationResult(
                    request=entry.request, latency_s=now - entry.t0,
                    prompt_tokens=self.prompt_tokens[i], completion_tokens=generated))
        return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)

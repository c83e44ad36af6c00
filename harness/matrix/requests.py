"""A phase's explicit requests: what a user's client sends, named as vLLM's request schema names
it, so a request can be pasted from client code into a matrix file.

ppconf's own models (no vLLM import): each endpoint is one model, told apart by ``endpoint``, so
a misspelt parameter is refused at load with its position and the closest name of that
endpoint's schema. The names are kept equal to the installed vLLM's request models by a contract
test (``tests/test_requests_contract.py``, through ``VLLM_MODELS``). A completions or chat request
may name its ``model``: a LoRA adapter by the name the server serves it under (vLLM's way of
choosing one); unset, the check step names the served base model. Where a field is left unset
the server's default applies, except ``max_tokens``, which ppconf sets to 16 so every request
has a known length.

A phase's ``explicit`` is a list of requests, or the name of a YAML file beside the matrix file
(``requests: [...]``), validated the same way with positions in that file.

A request dumped as it is (``model_dump``: a plan's JSON, evidence, a reference's key) describes
its images instead of holding their bytes (``harness.matrix.images``); only ``body()``, what is
sent, holds them (serialised with ``SENT`` as its context).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from harness.matrix import images
from harness.matrix.strict import Strict

MAX_TOKENS = 2_097_152
MAX_ITEMS = 100_000
DEFAULT_MAX_TOKENS = 16
# the serialisation context of what is sent to a server: images as their bytes
SENT: dict[str, Any] = {"sent": True}


def _sent(info: SerializationInfo) -> bool:
    return isinstance(info.context, dict) and bool(info.context.get("sent"))


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ImageUrl(Strict):
    url: str = Field(pattern=r"^(data:image/|https?://)")
    detail: Literal["auto", "low", "high"] | None = None

    @model_serializer(mode="wrap")
    def _described(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        """Sent as written; kept with a ``data:`` URL's description in place of the URL."""
        out: dict[str, Any] = handler(self)
        if not _sent(info) and self.url.startswith("data:"):
            out = {"data": images.describe_data_url(self.url), **{k: v for k, v in out.items() if k != "url"}}
        return out


class ImageUrlPart(Strict):
    """An image as OpenAI's schema sends it: a ``data:`` URL or one the server fetches."""

    type: Literal["image_url"]
    image_url: ImageUrl


class GeneratedImagePart(Strict):
    """ppconf's own part: a seeded image of random pixels (``harness.matrix.images``), sent as an
    ``image_url`` part holding its PNG, the same bytes to a case and to its reference."""

    type: Literal["generated_image"]
    seed: int = Field(0, ge=0)
    width: int = Field(32, ge=1, le=images.MAX_SIDE)
    height: int = Field(32, ge=1, le=images.MAX_SIDE)

    @model_serializer
    def _as_sent(self, info: SerializationInfo) -> dict[str, Any]:
        """Sent as an ``image_url`` part holding the PNG; kept as its seed, size and digest."""
        if _sent(info):
            return {"type": "image_url", "image_url": {"url": images.noise_url(self.seed, self.width, self.height)}}
        digest = images.noise_digest(self.seed, self.width, self.height)
        return {"type": self.type, "seed": self.seed, "width": self.width, "height": self.height, "digest": digest}


ContentPart = Annotated[TextPart | ImageUrlPart | GeneratedImagePart, Field(discriminator="type")]


class Message(Strict):
    """A chat message as OpenAI's schema has it: text, or a list of parts (text and images)."""

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class FunctionDefinition(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(Strict):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class FunctionName(Strict):
    name: str


class NamedToolChoice(Strict):
    """``tool_choice`` naming the function the answer must call (one of the request's ``tools``)."""

    type: Literal["function"] = "function"
    function: FunctionName


class JsonSchema(Strict):
    name: str = "answer"
    description: str | None = None
    # `schema` as OpenAI spells it (pydantic's BaseModel has a `schema` method of its own)
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)


class ResponseFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None


class StructuredOutputs(Strict):
    """vLLM's structured outputs: exactly one of json (a JSON schema), regex, choice, grammar."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = Field(None, min_length=1)
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)


class StreamOptions(Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class _Request(Strict):
    """What every explicit request has: its name in the evidence (``<phase>:<index>`` by default)."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
    # the installed vLLM's request models whose fields these names must be (module:class)
    VLLM_MODELS: ClassVar[tuple[str, ...]] = ()
    # ppconf's own fields, not sent
    OWN: ClassVar[frozenset[str]] = frozenset({"endpoint", "name"})

    def body(self) -> dict[str, Any]:
        """The request's JSON body as vLLM takes it (the served model is added by the sender)."""
        return self.model_dump(exclude=set(self.OWN), exclude_none=True, by_alias=True, context=SENT)

    def tokens(self) -> int:
        """Tokens asked of the model beyond the prompt (what the model's length must also hold)."""
        return 0


class _Sampling(_Request):
    """Sampling parameters shared by completions and chat, with vLLM's names."""

    # a served model other than the base one: a LoRA adapter's name (--lora-modules NAME=PATH, or a
    # load-lora-adapter request's lora_name)
    model: str | None = Field(None, min_length=1, max_length=256)
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, ge=1, le=MAX_TOKENS)
    n: int = Field(1, ge=1, le=128)
    seed: int | None = None
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1)
    min_p: float | None = Field(None, ge=0, le=1)
    prompt_logprobs: int | None = Field(None, ge=-1, le=20)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool | None = None
    min_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    ignore_eos: bool | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0)
    logit_bias: dict[str, float] | None = None
    skip_special_tokens: bool | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    # streamed: the answer's events are put back together choice by choice (by index) before the
    # comparison, as a client reassembles them; usage arrives only when stream_options asks for it
    stream: bool | None = None
    stream_options: StreamOptions | None = None

    def tokens(self) -> int:
        return self.max_tokens

    @property
    def sampled(self) -> bool:
        """Whether tokens are drawn at random (only a seed makes them repeatable): a temperature
        above 0, or none given (vLLM's default is 1, as OpenAI's)."""
        return self.temperature is None or self.temperature > 0


class CompletionsRequest(_Sampling):
    """POST /v1/completions: a text or token-id prompt, or several text prompts in one request
    (their choices in prompt order, ``n`` each)."""

    endpoint: Literal["completions"]
    prompt: str | list[Annotated[int, Field(ge=0)]] | list[str]
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool | None = None
    VLLM_MODELS = ("vllm.entrypoints.openai.completion.protocol:CompletionRequest",)


class ChatRequest(_Sampling):
    """POST /v1/chat/completions: messages through the model's chat template."""

    endpoint: Literal["chat"]
    messages: list[Message] = Field(min_length=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool | None = None
    VLLM_MODELS = ("vllm.entrypoints.openai.chat_completion.protocol:ChatCompletionRequest",)

    @model_validator(mode="after")
    def _tool_choice_among_tools(self) -> ChatRequest:
        """vLLM refuses these at the request; ppconf at load, where the file and line are known."""
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError(f"tool_choice {self.tool_choice!r} needs `tools`")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = [t.function.name for t in self.tools or ()]
            if self.tool_choice.function.name not in names:
                raise ValueError(
                    f"tool_choice names function {self.tool_choice.function.name!r}, none of the request's "
                    f"tools ({', '.join(names)})"
                )
        return self


PoolingInput = str | list[str] | list[Annotated[int, Field(ge=0)]]


class EmbeddingsRequest(_Request):
    """POST /v1/embeddings."""

    endpoint: Literal["embeddings"]
    input: PoolingInput
    dimensions: int | None = Field(None, ge=1)
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    VLLM_MODELS = ("vllm.entrypoints.pooling.embed.protocol:EmbeddingCompletionRequest",)


class ClassifyRequest(_Request):
    """POST /classify."""

    endpoint: Literal["classify"]
    input: PoolingInput
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    VLLM_MODELS = ("vllm.entrypoints.pooling.classify.protocol:ClassificationCompletionRequest",)


class ScoreRequest(_Request):
    """POST /score: each text_1 against each text_2."""

    endpoint: Literal["score"]
    text_1: str | list[str]
    text_2: str | list[str]
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    VLLM_MODELS = ("vllm.entrypoints.pooling.scoring.protocol:ScoreTextRequest",)


class RerankRequest(_Request):
    """POST /rerank: documents ordered by relevance to the query."""

    endpoint: Literal["rerank"]
    query: str
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(None, ge=0)
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    VLLM_MODELS = ("vllm.entrypoints.pooling.scoring.protocol:RerankRequest",)


class TokenizeRequest(_Request):
    """POST /tokenize: a text prompt, or messages through the chat template."""

    endpoint: Literal["tokenize"]
    prompt: str | None = None
    messages: list[Message] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    chat_template: str | None = None
    VLLM_MODELS = (
        "vllm.entrypoints.serve.tokenize.protocol:TokenizeCompletionRequest",
        "vllm.entrypoints.serve.tokenize.protocol:TokenizeChatRequest",
    )

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a tokenize request names a prompt or messages (one of them)")
        return self


class DetokenizeRequest(_Request):
    """POST /detokenize: token ids back to text."""

    endpoint: Literal["detokenize"]
    # vLLM's `tokens` (named apart here: `tokens()` is what a request asks of the model's length)
    token_ids: list[Annotated[int, Field(ge=0)]] = Field(alias="tokens", min_length=1)
    VLLM_MODELS = ("vllm.entrypoints.serve.tokenize.protocol:DetokenizeRequest",)


class ResetPrefixCacheRequest(_Request):
    """POST /reset_prefix_cache (vLLM's development endpoints: VLLM_SERVER_DEV_MODE=1)."""

    endpoint: Literal["reset-prefix-cache"]


class LoadLoraAdapterRequest(_Request):
    """POST /v1/load_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING=1, --enable-lora)."""

    endpoint: Literal["load-lora-adapter"]
    lora_name: str
    lora_path: str
    VLLM_MODELS = ("vllm.entrypoints.serve.lora.protocol:LoadLoRAAdapterRequest",)


class UnloadLoraAdapterRequest(_Request):
    """POST /v1/unload_lora_adapter."""

    endpoint: Literal["unload-lora-adapter"]
    lora_name: str
    VLLM_MODELS = ("vllm.entrypoints.serve.lora.protocol:UnloadLoRAAdapterRequest",)


class SleepRequest(_Request):
    """POST /sleep?level=N (development endpoints, --enable-sleep-mode, where the platform has it)."""

    endpoint: Literal["sleep"]
    level: Literal[1, 2] = 1


class WakeUpRequest(_Request):
    """POST /wake_up."""

    endpoint: Literal["wake-up"]


class ModelsRequest(_Request):
    """GET /v1/models: the served models' ids and roots must be the reference's."""

    endpoint: Literal["models"]


ExplicitRequest = Annotated[
    CompletionsRequest
    | ChatRequest
    | EmbeddingsRequest
    | ClassifyRequest
    | ScoreRequest
    | RerankRequest
    | TokenizeRequest
    | DetokenizeRequest
    | ResetPrefixCacheRequest
    | LoadLoraAdapterRequest
    | UnloadLoraAdapterRequest
    | SleepRequest
    | WakeUpRequest
    | ModelsRequest,
    Field(discriminator="endpoint"),
]

REQUEST_MODELS: dict[str, type[_Request]] = {
    m.model_fields["endpoint"].annotation.__args__[0]: m  # type: ignore[union-attr]
    for m in (
        CompletionsRequest,
        ChatRequest,
        EmbeddingsRequest,
        ClassifyRequest,
        ScoreRequest,
        RerankRequest,
        TokenizeRequest,
        DetokenizeRequest,
        ResetPrefixCacheRequest,
        LoadLoraAdapterRequest,
        UnloadLoraAdapterRequest,
        SleepRequest,
        WakeUpRequest,
        ModelsRequest,
    )
}


class RequestFile(Strict):
    """A file of explicit requests beside the matrix file: ``requests: [...]``."""

    requests: list[ExplicitRequest] = Field(min_length=1, max_length=MAX_ITEMS)

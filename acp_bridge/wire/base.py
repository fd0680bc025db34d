"""The base of every ACP wire model, and the few validation helpers they share.

The bridge relays almost everything as raw bytes; these models exist only for the messages it
inspects or originates. Three rules follow from that (acp-protocol.md sections 2 and 9):

* **Nothing is lost.** ``extra="allow"`` keeps unknown fields, and ``_meta`` is a declared field,
  so ``parse(data).dump() == data`` for any spec-shaped ``data``.
* **Nothing is invented.** :meth:`WireModel.dump` uses ``exclude_unset``: an optional field we
  were never given is not emitted (no ``"_meta": null``, no ``"annotations": null``), while an
  explicit ``null`` from the wire survives, because for some fields (``session_info_update``
  ``title``) ``null`` means "clear" and absence means "unchanged". Discriminator tags
  (``sessionUpdate``, ``type``, ``outcome``) always count as set so constructed models carry them.
* **Lenient where the spec is.** Optional fields that the reference (Rust) types salvage fall back
  to their default on a malformed value (:data:`SALVAGE`), and arrays they filter drop invalid
  items (:data:`SKIP_INVALID`). Required fields and malformed *known* union variants still fail.

Wire input must be validated with :meth:`WireModel.parse` (or ``by_name=False``): the snake_case
field names are accepted only from Python code, so an unknown wire field that happens to be
called ``meta`` or ``session_id`` stays an unknown field instead of filling a declared one.

Cheap to import, because a CLI run pays for every model it defines (issue #8):

* ``defer_build``: a model's validator and serializer are built on its first use, not when the
  class is defined. A one-shot ``acp-bridge run`` uses five models out of about a hundred. After
  the first use pydantic replaces the placeholder with the built validator, so later calls cost
  what they always did. The module-level ``TypeAdapter`` objects are deferred the same way.
* The model modules do not use ``from __future__ import annotations``: string annotations would
  be evaluated again by pydantic for every field of every class (a third of defining a model).
  Names must therefore be defined before the annotations that use them.
"""

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal, Self, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticUndefined, PydanticUseDefault, from_json

__all__ = [
    "SALVAGE",
    "SKIP_INVALID",
    "UNKNOWN_TAG",
    "EmptyResponse",
    "Meta",
    "NullableResult",
    "WireModel",
    "tag_discriminator",
]

UNKNOWN_TAG = "unknown"
"""The union tag that :func:`tag_discriminator` gives to variants it does not recognise."""


def _use_default_on_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        raise PydanticUseDefault() from None


def _skip_invalid_items(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    if not isinstance(value, list):
        return handler(value)
    kept: list[Any] = []
    for item in value:
        try:
            kept.extend(handler([item]))
        except ValidationError:
            continue
    return kept


SALVAGE = WrapValidator(_use_default_on_error)
"""``Annotated`` metadata: a malformed value becomes the field's default instead of an error."""

SKIP_INVALID = WrapValidator(_skip_invalid_items)
"""``Annotated`` metadata for list fields: items that fail validation are dropped."""

Meta = Annotated[dict[str, Any] | None, SALVAGE]
"""The ``_meta`` object every ACP type may carry (acp-protocol.md section 9)."""


class WireModel(BaseModel):
    """Base of every ACP shape: camelCase on the wire, snake_case in Python, unknown fields kept.

    Use :meth:`parse` / :meth:`parse_json` on data from the wire and :meth:`dump` /
    :meth:`dump_json` to produce it.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="allow",
        defer_build=True,  # built on first use (see the module docstring)
    )

    # to_camel cannot produce "_meta", and a leading underscore would make it a private attribute.
    meta: Meta = Field(None, alias="_meta")

    _tag_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._tag_fields = frozenset(
            name
            for name, info in cls.model_fields.items()
            if get_origin(info.annotation) is Literal
            and info.default is not PydanticUndefined
            and info.default is not None
        )

    def model_post_init(self, context: Any, /) -> None:
        fields_set = self.__pydantic_fields_set__
        fields_set.update(self._tag_fields)
        if self.meta is None:
            # Never emit "_meta": null, even if someone passed meta=None or the peer sent it.
            fields_set.discard("meta")

    @classmethod
    def parse(cls, data: Any) -> Self:
        """Validate a decoded JSON value from the wire (camelCase keys only).

        Raises:
            pydantic.ValidationError: a required field is missing or malformed.
        """
        return cls.model_validate(data, by_alias=True, by_name=False)

    @classmethod
    def parse_json(cls, data: str | bytes | bytearray) -> Self:
        """Validate raw JSON text from the wire (camelCase keys only).

        Raises:
            ValueError: not JSON (plain ValueError), or a required field is missing or malformed
                (pydantic.ValidationError, a ValueError subclass).
        """
        # Not model_validate_json: in JSON mode pydantic-core 2.13 silently drops an unknown key
        # that equals a field's Python name (e.g. "meta", "session_id") instead of keeping it as
        # an extra. Parsing with pydantic_core's JSON reader first keeps it, and is still fast.
        return cls.parse(from_json(data, allow_inf_nan=False))

    def dump(self) -> dict[str, Any]:
        """The JSON-ready wire form: camelCase keys, unknown fields kept, unset fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def dump_json(self) -> bytes:
        """Compact JSON bytes of :meth:`dump` (no newline, so safe to frame as NDJSON)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_unset=True)


class NullableResult(WireModel):
    """A result whose fields are all optional; a ``null`` result parses as ``{}``.

    The docs show empty results both as ``{}`` and as ``null`` (acp-protocol.md section 2).
    """

    @model_validator(mode="before")
    @classmethod
    def _null_is_empty(cls, data: Any) -> Any:
        return {} if data is None else data


class EmptyResponse(NullableResult):
    """``{}`` (or ``null``): the result of authenticate, logout, session/close|delete|set_mode,
    fs/write_text_file, terminal/kill and terminal/release."""


def tag_discriminator(
    alias: str,
    attr: str,
    known: Iterable[str],
    *,
    missing: str | None = None,
) -> Discriminator:
    """A callable union discriminator that sends unrecognised tags to :data:`UNKNOWN_TAG`.

    Unlike a plain ``Union[Known, Unknown]`` (which would silently fall back when a known variant
    is malformed), this picks the variant from the tag alone, so a malformed known variant still
    fails and only genuinely new tags reach the fallback.

    Args:
        alias: the tag key on the wire, e.g. ``"sessionUpdate"``.
        attr: the tag attribute on an already-built model, e.g. ``"session_update"``.
        known: the tags that have their own variant.
        missing: the tag to use when the key is absent (``"stdio"`` for MCP servers); when None,
            an absent or non-string tag is a validation error.
    """
    known_tags = frozenset(known)

    def pick(value: Any) -> str | None:
        tag = value.get(alias) if isinstance(value, dict) else getattr(value, attr, None)
        if tag is None:
            return missing
        if not isinstance(tag, str):
            return None
        return tag if tag in known_tags else UNKNOWN_TAG

    return Discriminator(pick)

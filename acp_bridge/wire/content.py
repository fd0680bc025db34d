"""ContentBlock: the items of a prompt, of message chunks and of tool-call content.

acp-protocol.md section 4 ("ContentBlock"). Text and ``resource_link`` are always allowed; image,
audio and embedded ``resource`` blocks need the matching ``promptCapabilities`` flag. A block with
an unrecognised ``type`` parses as :class:`UnknownContent` with every field kept.
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Tag, TypeAdapter

from acp_bridge.wire.base import SALVAGE, UNKNOWN_TAG, WireModel, tag_discriminator

__all__ = [
    "CONTENT_BLOCK_ADAPTER",
    "AudioContent",
    "BlobResourceContents",
    "ContentBlock",
    "EmbeddedResource",
    "ImageContent",
    "ResourceLink",
    "TextContent",
    "TextResourceContents",
    "UnknownContent",
]

# Annotations ({audience?, lastModified?, priority?}) are relayed, never inspected: keep them raw.
_Annotations = Annotated[dict[str, Any] | None, SALVAGE]


class TextContent(WireModel):
    """``{type:"text", text}``."""

    type: Literal["text"] = "text"
    text: str
    annotations: _Annotations = None


class ImageContent(WireModel):
    """``{type:"image", data, mimeType, uri?}``; ``data`` is base64."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str
    uri: Annotated[str | None, SALVAGE] = None
    annotations: _Annotations = None


class AudioContent(WireModel):
    """``{type:"audio", data, mimeType}``; ``data`` is base64."""

    type: Literal["audio"] = "audio"
    data: str
    mime_type: str
    annotations: _Annotations = None


class ResourceLink(WireModel):
    """``{type:"resource_link", uri, name, mimeType?, title?, description?, size?}``."""

    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str
    mime_type: Annotated[str | None, SALVAGE] = None
    title: Annotated[str | None, SALVAGE] = None
    description: Annotated[str | None, SALVAGE] = None
    size: Annotated[int | None, SALVAGE] = None
    annotations: _Annotations = None


class TextResourceContents(WireModel):
    """An embedded text resource: ``{uri, text, mimeType?}``."""

    uri: str
    text: str
    mime_type: Annotated[str | None, SALVAGE] = None


class BlobResourceContents(WireModel):
    """An embedded binary resource: ``{uri, blob, mimeType?}``; ``blob`` is base64."""

    uri: str
    blob: str
    mime_type: Annotated[str | None, SALVAGE] = None


class EmbeddedResource(WireModel):
    """``{type:"resource", resource: TextResourceContents | BlobResourceContents}``."""

    type: Literal["resource"] = "resource"
    resource: TextResourceContents | BlobResourceContents
    annotations: _Annotations = None


class UnknownContent(WireModel):
    """A content block whose ``type`` this version does not know; all fields are kept as extras."""

    type: str


_KNOWN_TYPES = ("text", "image", "audio", "resource_link", "resource")

ContentBlock = Annotated[
    Annotated[TextContent, Tag("text")]
    | Annotated[ImageContent, Tag("image")]
    | Annotated[AudioContent, Tag("audio")]
    | Annotated[ResourceLink, Tag("resource_link")]
    | Annotated[EmbeddedResource, Tag("resource")]
    | Annotated[UnknownContent, Tag(UNKNOWN_TAG)],
    tag_discriminator("type", "type", _KNOWN_TYPES),
]
"""Any content block, discriminated on ``type``; unknown types become :class:`UnknownContent`."""

CONTENT_BLOCK_ADAPTER: TypeAdapter[ContentBlock] = TypeAdapter(
    ContentBlock, config=ConfigDict(defer_build=True)
)

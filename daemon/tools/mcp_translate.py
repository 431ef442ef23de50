"""How an MCP server's tools and results become the daemon's: names, schemas, result text.

Pure translation, no I/O: a remote tool's name is made one the model's API accepts and
namespaced by its server; its input schema is made safe for the registry's validator; a
call's result becomes text (text joined, images and other binary content summarised, a
result marked as an error a ToolError with the server's words).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from daemon.tools.registry import ToolError, label_untrusted

if TYPE_CHECKING:
    from mcp import types as mcp_types

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
# Arguments a permission pattern means something for, in preference order. Any other tool
# has no subject: rules and "always" answers take it as a whole.
_SUBJECTS = ("path", "url", "uri", "command")


def tool_name(server: str, remote: str, taken: Iterable[str] = ()) -> str:
    """`mcp__<server>__<tool>`, within the API's name rule and unique among `taken`.

    Characters the API refuses become `_`; a name too long (or clashing once sanitised) is
    cut and ends in a short hash of the remote name, so it stays stable across restarts.
    """
    name = _UNSAFE.sub("_", f"mcp__{server}__{remote}")
    used = set(taken)
    if _TOOL_NAME.match(name) and name not in used:
        return name
    digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
    return f"{name[: 64 - 9]}_{digest}"


def portable_schema(schema: Any) -> dict[str, Any]:
    """The server's input schema, made safe for the registry's `validate` and the API.

    The keywords `validate` reads are kept only when well-formed (a boolean or list where a
    schema belongs, an unknown type name, a non-numeric bound are dropped: the server checks
    its own arguments anyway); every other keyword is passed through to the model untouched.
    The top level is always an object schema, as the API requires.
    """
    out = _portable(schema if isinstance(schema, dict) else {})
    out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    return out


_KNOWN_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def _portable(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            known = [k for k in kinds if isinstance(k, str) and k in _KNOWN_TYPES]
            if known:
                out[key] = known if isinstance(value, list) else known[0]
        elif key == "enum":
            if isinstance(value, list):
                out[key] = value
        elif key in ("minLength", "maxLength", "minimum", "maximum"):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = value
        elif key == "required":
            if isinstance(value, list):
                out[key] = [r for r in value if isinstance(r, str)]
        elif key == "properties":
            if isinstance(value, dict):
                out[key] = {
                    str(k): _portable(v) if isinstance(v, dict) else {} for k, v in value.items()
                }
        elif key == "items":
            if isinstance(value, dict):
                out[key] = _portable(value)
        else:
            out[key] = value
    return out


def permission_subject(schema: dict[str, Any]) -> str | None:
    """The argument a permission pattern matches (a path, URL or command), or None."""
    props = schema.get("properties", {})
    strings = {k for k, v in props.items() if v.get("type") == "string"}
    return next((name for name in _SUBJECTS if name in strings), None)


def _size(base64_data: str) -> str:
    n = len(base64_data) * 3 // 4
    return f"{n} B" if n < 1024 else f"{n / 1024:.0f} KB"


def render_result(server: str, remote: str, result: mcp_types.CallToolResult) -> str:
    """A call's result as text for the model: text joined, anything else summarised.

    Raises ToolError with the server's words when the result says the call failed.
    """
    from mcp import types

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            parts.append(f"[image: {block.mime_type}, {_size(block.data)}]")
        elif isinstance(block, types.AudioContent):
            parts.append(f"[audio: {block.mime_type}, {_size(block.data)}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(
                f"[resource link: {block.uri}" + (f" ({block.name})]" if block.name else "]")
            )
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(f"[resource: {res.uri}]\n{res.text}")
            else:
                parts.append(
                    f"[resource: {res.uri}, {res.mime_type or 'binary'}, {_size(res.blob)}]"
                )
        else:
            parts.append(f"[{getattr(block, 'type', 'unknown')} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        # The server's own words: outside text, labelled like its results.
        said = label_untrusted(f"mcp__{server}__{remote}", text) if text else "no details"
        raise ToolError(f"MCP server '{server}' tool '{remote}' failed: {said}")
    return text

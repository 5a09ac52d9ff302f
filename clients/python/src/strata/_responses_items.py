"""Responses API input items to Strata events and back, losslessly.

One item is one event, so that popping the newest item is retracting one event:

========================================  ===========================================
item                                      event
========================================  ===========================================
``message``, role user/system/developer   ``UserPromptSubmitted`` (system and developer
                                          text with ``actor="platform"``: it is not
                                          the user's request)
``message``, role assistant               ``ModelResponseReceived`` (no tool calls)
``function_call``                         ``ToolCallRequested``
``function_call_output``                  ``ToolCallFinished``
anything else (reasoning, hosted tools)   ``ProviderItemRecorded``
========================================  ===========================================

The canonical payload carries what Strata reads (the text, the call, the output); the rest of
the item travels beside it in the payload field ``openai_item`` with the moved fields left out,
and reading puts them back. Where a field cannot be moved without loss (several text parts,
arguments that are not compact JSON) the item keeps it whole. Events that other producers wrote
(a session imported from elsewhere) read back as the plain items they describe.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import JsonValue

from .builders import EventBuilder, new_id
from .events import (
    Event,
    ModelResponseReceived,
    ProviderItemRecorded,
    ToolCallFailed,
    ToolCallFinished,
    ToolCallRequested,
    UserPromptSubmitted,
)

__all__ = ["ITEM_FIELD", "RESPONSES_FORMAT", "event_for_item", "items_for_event"]

#: The payload field holding the rest of the item.
ITEM_FIELD = "openai_item"
#: The provider format the items belong to (as ``ProviderItemRecorded.format``).
RESPONSES_FORMAT = "openai-responses"

Item = dict[str, Any]

_TEXT_PARTS = ("input_text", "output_text")
_PROMPT_ROLES = ("user", "system", "developer")


def event_for_item(events: EventBuilder, item: Mapping[str, Any]) -> Event:
    """The event that records ``item`` on ``events``' session and branch."""
    if not isinstance(item, Mapping):
        raise TypeError(f"a Responses input item is a mapping, not {type(item).__name__}")
    rest: Item = copy.deepcopy(dict(item))
    kind = rest.get("type", "message" if "role" in rest else None)
    if kind == "message" and rest.get("role") in _PROMPT_ROLES:
        text = _take_text(rest)
        actor = "user" if rest["role"] == "user" else "platform"
        payload = UserPromptSubmitted(message_id=new_id("msg"), text=text, **{ITEM_FIELD: rest})
        return events.event(payload, actor=actor)
    if kind == "message" and rest.get("role") == "assistant":
        text = _take_text(rest)
        # The item keeps its own id: a provider's ids need not be unique within a session.
        response = ModelResponseReceived(message_id=new_id("msg"), text=text, **{ITEM_FIELD: rest})
        return events.event(response, actor="assistant")
    if kind == "function_call" and _has_str(rest, "call_id", "name"):
        call_id, name = rest.pop("call_id"), rest.pop("name")
        request = ToolCallRequested(
            tool_call_id=call_id, name=name, args=_take_arguments(rest), **{ITEM_FIELD: rest}
        )
        return events.event(request, actor="assistant")
    if kind == "function_call_output" and _has_str(rest, "call_id"):
        call_id = rest.pop("call_id")
        output = rest.pop("output") if isinstance(rest.get("output"), str) else None
        if output is None:
            # Structured output (text and image parts): Strata reads its text, the item keeps it.
            output = _joined_text(rest.get("output"))
        result = ToolCallFinished(tool_call_id=call_id, output=output, **{ITEM_FIELD: rest})
        return events.event(result, actor="tool")
    opaque = ProviderItemRecorded(format=RESPONSES_FORMAT, item=_json_object(dict(item)))
    return events.event(opaque, actor="assistant")


def items_for_event(event: Event, output_of: Callable[[str], str]) -> list[Item]:
    """The items ``event`` records (none for an event that is no conversation item).

    ``output_of`` returns the full output of an artifact ref, for a tool output the server
    stored as an artifact."""
    payload = event.payload
    rest = _extra_item(payload)
    if isinstance(payload, UserPromptSubmitted):
        if rest is None:
            return [{"role": "user", "content": payload.text}]
        return [_put_text(rest, payload.text)]
    if isinstance(payload, ModelResponseReceived):
        if rest is not None:
            return [_put_text(rest, payload.text)]
        items: list[Item] = []
        if payload.text:
            items.append(_assistant_message(payload.message_id, payload.text))
        for call in payload.tool_calls:
            items.append(_function_call(call.tool_call_id, call.name, call.args))
        return items
    if isinstance(payload, ToolCallRequested):
        item = _function_call(payload.tool_call_id, payload.name, payload.args)
        return [item if rest is None else {**item, **rest}]
    if isinstance(payload, ToolCallFinished):
        output = payload.output
        if output is None and payload.output_ref is not None:
            output = output_of(payload.output_ref)
        item = {
            "call_id": payload.tool_call_id,
            "output": output or "",
            "type": "function_call_output",
        }
        return [item if rest is None else {**item, **rest}]
    if isinstance(payload, ToolCallFailed):
        return [
            {
                "call_id": payload.tool_call_id,
                "output": payload.error,
                "type": "function_call_output",
            }
        ]
    if isinstance(payload, ProviderItemRecorded) and payload.format == RESPONSES_FORMAT:
        return [dict(payload.item)]
    return []


def _take_text(rest: Item) -> str:
    """Moves a message's text out of ``rest`` when it can come back as it was."""
    content = rest.get("content")
    if isinstance(content, str):
        del rest["content"]
        return content
    if not isinstance(content, list):
        return ""
    texts = [p for p in content if isinstance(p, dict) and p.get("type") in _TEXT_PARTS]
    if len(texts) == 1 and isinstance(texts[0].get("text"), str):
        return str(texts[0].pop("text"))
    return _joined_text(content)


def _put_text(rest: Item, text: str) -> Item:
    item = copy.deepcopy(rest)
    content = item.get("content")
    if content is None:
        item["content"] = text
        return item
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") in _TEXT_PARTS and "text" not in part:
                part["text"] = text
    return item


def _joined_text(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    texts = [p.get("text") for p in content if isinstance(p, dict)]
    return "\n".join(t for t in texts if isinstance(t, str))


def _take_arguments(rest: Item) -> JsonValue:
    """The call's arguments as a JSON object (``None`` when the text holds none); ``rest`` keeps
    the original text unless it is exactly what :func:`_arguments_text` writes back."""
    arguments = rest.get("arguments")
    if not isinstance(arguments, str):
        return None
    try:
        args: JsonValue = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(args, dict):
        return None
    if _arguments_text(args) == arguments:
        del rest["arguments"]
    return args


def _arguments_text(args: Any) -> str:
    return json.dumps(args, separators=(",", ":"), ensure_ascii=False)


def _function_call(call_id: str, name: str, args: Any) -> Item:
    arguments = args if isinstance(args, str) else _arguments_text({} if args is None else args)
    return {"arguments": arguments, "call_id": call_id, "name": name, "type": "function_call"}


def _assistant_message(message_id: str, text: str) -> Item:
    return {
        "id": message_id,
        "content": [{"annotations": [], "text": text, "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    }


def _extra_item(payload: Any) -> Item | None:
    extra = getattr(payload, "model_extra", None) or {}
    rest = extra.get(ITEM_FIELD)
    return dict(rest) if isinstance(rest, dict) else None


def _has_str(item: Item, *fields: str) -> bool:
    return all(isinstance(item.get(f), str) and item.get(f) for f in fields)


def _json_object(item: Item) -> dict[str, JsonValue]:
    """The item as plain JSON (an SDK model dumped to dicts is already; this checks it)."""
    loaded = json.loads(json.dumps(item))
    if not isinstance(loaded, dict):
        raise TypeError("a Responses input item is a JSON object")
    return loaded

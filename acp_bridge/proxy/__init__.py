"""``acp-bridge proxy``: a transparent editor <-> agent relay with supervision.

Pure parts: :mod:`.frames` (what the relay reads of a line), :mod:`.routing` (the id tables),
:mod:`.turns` (per-session prompt queue and cancel grace), :mod:`.registry` (what is needed to
restore sessions), :mod:`.answers` (the messages the bridge writes itself), :mod:`.redact`,
:mod:`.recording` and :mod:`.script` (recording and replay). I/O: :mod:`.relay` (the whole),
:mod:`.editor_link`, :mod:`.agent_side`, :mod:`.prompt_flow`, :mod:`.supervision`,
:mod:`.generation`, :mod:`.restore`, :mod:`.lines`, :mod:`.recorder`, :mod:`.replay`.
"""

"""The column names a support-data table uses for its question and its answer.

Training (``finetune.data.rows``) and the knowledge shelf (``knowledge.importers``) read the
same tables (Bitext's ``instruction``/``response``, ``question``/``answer`` ...), so they
share one list of names, tried in this order.
"""

from __future__ import annotations

PROMPT_NAMES = ("instruction", "prompt", "question", "query", "input", "user")
RESPONSE_NAMES = ("response", "completion", "output", "answer", "reply", "assistant")
MESSAGES_NAMES = ("messages", "conversations", "conversation", "chat")

"""The inspector's queries that PostgreSQL words differently (reading.py holds SQLite's): a
stream's text so far (a response's, a completion's, a message's), and the lists behind the
percentiles. Same columns, same values."""

from __future__ import annotations

# (CAST: a parameter joined to text must have a type.)
_PROMPT = """(SELECT omni_int(omni_json(r.data) -> 'prompt_tokens') FROM events r
    WHERE r.stream_id = CAST(:s AS text) || '/request' AND r.seq = 0)"""
_RESPONSE = f"""SELECT string_agg(CASE WHEN type = 'response.output_text.delta'
    THEN omni_json(data) ->> 'delta' END, '' ORDER BY seq), {_PROMPT}, count(*) FROM events
    WHERE stream_id = :s
    AND type IN ('response.output_text.delta', 'response.reasoning_text.delta')"""
_CONTENT = "(c.doc #>> '{choices,0,delta,content}')"
_REASONING = "(c.doc #>> '{choices,0,delta,reasoning_content}')"
_TEXT = "(c.doc #>> '{choices,0,text}')"
# The role chunk's content is "": it is no token.
_COMPLETION = f"""SELECT string_agg(coalesce({_CONTENT}, {_TEXT}), '' ORDER BY c.seq), {_PROMPT},
    count(nullif(coalesce({_CONTENT}, {_REASONING}, {_TEXT}), '')) FROM
    (SELECT seq, omni_json(data) AS doc FROM events
     WHERE stream_id = :s AND type IN ('chat.completion.chunk', 'text_completion.chunk')) AS c"""
_MESSAGE = f"""SELECT string_agg(c.doc #>> '{{delta,text}}', '' ORDER BY c.seq), {_PROMPT},
    count(*) FROM (SELECT seq, omni_json(data) AS doc FROM events
     WHERE stream_id = :s AND type = 'content_block_delta') AS c
    WHERE c.doc #>> '{{delta,type}}' != 'signature_delta'"""
SO_FAR = {"response": _RESPONSE, "completion": _COMPLETION, "message": _MESSAGE}
LISTS = (
    "SELECT string_agg((first_token_at - created_at)::text, ','), string_agg(CASE WHEN"
    " output_tokens > 1 AND finished_at > first_token_at THEN round((output_tokens"
    " - 1) * 1000.0 / (finished_at - first_token_at), 1)::text END, ',')"
)

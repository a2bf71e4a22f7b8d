"""The event vocabulary: every event type the log holds, the sets that end a stream, and the
statuses a finished response can have. Every layer names events from here.

A response owns three streams (omni.service.streams): `resp_X`, exactly what the API streams
(OpenAI's `response.*` types); `resp_X/request`, the accepted request, cancel requests and
the delete tombstone; `resp_X/tokens`, the token ids of a background generation. A chat or
text completion's stream holds its chunks as the API streams them, then one ending. An
embeddings request's stream `embd-X` holds its start and its ending (usage, timings), and a
speech request's stream `spch-X` the same (the audio's length and size, never the audio). A
transcription's stream `trsc-X` holds its start, its text's deltas, its segments and an ending.
An image generation's stream `img-X` holds its start, each image's making (its seed, size in
bytes: never the picture) and an ending. A conversation's `conv_X/request` holds its creation,
its metadata's updates and its tombstone; `conv_X` its items, each added or deleted as a fact.
"""

from __future__ import annotations

# --- a response's public stream (OpenAI's types) ---------------------------------------
# Every response stream ends with exactly one of these.
RESPONSE_ENDS = frozenset({"response.completed", "response.failed", "response.incomplete"})
# Lifecycle events that carry the whole response while it is not finished yet.
RESPONSE_LIFECYCLE = frozenset({"response.created", "response.queued", "response.in_progress"})
# The statuses of a response that is over: nothing will change it again.
FINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")

# --- chat and text completions --------------------------------------------------------
COMPLETION_CHUNK = {"chat": "chat.completion.chunk", "text": "text_completion.chunk"}
COMPLETION_USAGE = {"chat": "chat.completion.usage", "text": "text_completion.usage"}
COMPLETION_ERROR = "completion.error"
COMPLETION_CANCELLED = "completion.cancelled"
# Every completion stream ends with exactly one of these.
COMPLETION_ENDS = frozenset({*COMPLETION_USAGE.values(), COMPLETION_ERROR, COMPLETION_CANCELLED})

# --- embeddings (OpenAI streams none: the public stream `embd-X` is Omni's record) ------
EMBEDDING_IN_PROGRESS = "embedding.in_progress"  # accepted: its inputs are being embedded
EMBEDDING_COMPLETED = "embedding.completed"  # usage and timings, never the vectors
EMBEDDING_FAILED = "embedding.failed"
# Every embeddings stream ends with exactly one of these.
EMBEDDING_ENDS = frozenset({EMBEDDING_COMPLETED, EMBEDDING_FAILED})

# --- speech (OpenAI streams only the audio: the public stream `spch-X` is Omni's record) --
SPEECH_IN_PROGRESS = "speech.in_progress"  # accepted: its input is being spoken
SPEECH_COMPLETED = "speech.completed"  # the audio's duration and bytes, never the audio
SPEECH_FAILED = "speech.failed"
SPEECH_ENDS = frozenset({SPEECH_COMPLETED, SPEECH_FAILED})
# What `stream_format: "sse"` sends (OpenAI's types), never stored: they carry the audio.
SPEECH_AUDIO_DELTA = "speech.audio.delta"
SPEECH_AUDIO_DONE = "speech.audio.done"

# --- transcriptions and translations (`trsc-X`): OpenAI's stream events, between Omni's
# start, its segments (with timestamps: what verbose_json, srt and vtt are made of) and a
# failure. A stream sends the `transcript.*` ones and a failure.
TRANSCRIPTION_IN_PROGRESS = "transcription.in_progress"  # accepted: the audio is being heard
# One 30 s window heard (its number, the seconds heard so far); its text's deltas follow.
TRANSCRIPTION_WINDOW = "transcription.window"
TRANSCRIPT_DELTA = "transcript.text.delta"
TRANSCRIPTION_SEGMENTS = "transcription.segments"  # language, duration, segments, words
TRANSCRIPT_DONE = "transcript.text.done"  # the whole text and usage (seconds of audio)
TRANSCRIPTION_FAILED = "transcription.failed"
# Every transcription stream ends with exactly one of these.
TRANSCRIPTION_ENDS = frozenset({TRANSCRIPT_DONE, TRANSCRIPTION_FAILED})

# --- image generations (`img-X`): Omni's record; OpenAI streams only the pictures --------
IMAGES_IN_PROGRESS = "images.in_progress"  # accepted: its images are being drawn
IMAGES_IMAGE = "images.image"  # one image drawn: its index, seed and bytes, never the picture
IMAGES_COMPLETED = "images.completed"  # usage and timings
IMAGES_FAILED = "images.failed"
IMAGES_ENDS = frozenset({IMAGES_COMPLETED, IMAGES_FAILED})
# What `stream: true` sends (OpenAI's types), never stored: they carry the pictures.
IMAGE_PARTIAL = "image_generation.partial_image"
IMAGE_COMPLETED = "image_generation.completed"

# --- Omni's own events (the request streams, tokens, metadata) ------------------------
ACCEPTED = "omni.request.accepted"
CANCEL_REQUESTED = "omni.response.cancel_requested"
DELETED = "omni.response.deleted"
TOKENS = "omni.tokens"
PREFILL_PROGRESS = "omni.prefill.progress"  # {fed, total}: a long prompt's chunk was fed
METADATA_UPDATED = "omni.completion.metadata_updated"
COMPLETION_DELETED = "omni.completion.deleted"

# The API each object belongs to (the `kind` its accepted request records) and its id prefix.
# Each API answers 404 for ids of another kind, before it reads or writes anything else.
RESPONSE, CHAT, TEXT, EMBEDDING, SPEECH = "response", "chat", "text", "embedding", "speech"
ID_PREFIXES = {
    RESPONSE: "resp_",
    CHAT: "chatcmpl-",
    TEXT: "cmpl-",
    EMBEDDING: "embd-",
    SPEECH: "spch-",
}
TRANSCRIPTION = "transcription"  # a transcription or a translation (its request's `task`)
ID_PREFIXES[TRANSCRIPTION] = "trsc-"
IMAGE = "image"  # an image generation
ID_PREFIXES[IMAGE] = "img-"

# --- Anthropic's Messages API (`msg_X`): the events exactly as streamed (Anthropic's types),
# then one ending: `message_stop`, Anthropic's `error` event, or a cancel never sent.
MESSAGE_START = "message_start"
BLOCK_START = "content_block_start"
BLOCK_DELTA = "content_block_delta"
BLOCK_STOP = "content_block_stop"
MESSAGE_DELTA = "message_delta"
MESSAGE_STOP = "message_stop"
MESSAGE_ERROR = "error"
MESSAGE_CANCELLED = "omni.message.cancelled"
MESSAGE_ENDS = frozenset({MESSAGE_STOP, MESSAGE_ERROR, MESSAGE_CANCELLED})
MESSAGE = "message"  # a Messages API request (Anthropic's)
ID_PREFIXES[MESSAGE] = "msg_"

# --- conversations (`conv_X`): no stream of OpenAI's, Omni's facts. `conv_X/request` holds
# the creation (omni.request.accepted), metadata updates and the tombstone; `conv_X` its items,
# each one added (by a client, or by a response's turn as it ends) and maybe deleted later.
CONVERSATION_UPDATED = "omni.conversation.updated"
CONVERSATION_DELETED = "omni.conversation.deleted"
CONVERSATION_ITEM_ADDED = "omni.conversation.item.added"
CONVERSATION_ITEM_DELETED = "omni.conversation.item.deleted"
CONVERSATION = "conversation"
ID_PREFIXES[CONVERSATION] = "conv_"

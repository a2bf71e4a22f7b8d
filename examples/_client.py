"""The OpenAI SDK pointed at a local Omni server (OMNI_URL overrides the address)."""

import os

from openai import OpenAI

BASE_URL = os.environ.get("OMNI_URL") or "http://127.0.0.1:10240/v1"
client = OpenAI(base_url=BASE_URL, api_key="not-needed")
MODEL = client.models.list().data[0].id

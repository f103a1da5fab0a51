#!/usr/bin/env bash
# Install, build the offline demo models if absent, and serve tiny-llm on port ${PORT:-8000}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1
python scripts/make_demo_models.py models
PORT=${PORT:-8000}
ovserve serve --model_path models/tiny-llm --model_name tiny-llm --port "$PORT" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' INT TERM EXIT
until curl -sf "http://localhost:$PORT/v2/health/ready" >/dev/null; do
  kill -0 $server 2>/dev/null || { echo "ovserve exited during startup" >&2; exit 1; }
  sleep 0.5
done
cat <<TXT

ovserve is serving the demo model 'tiny-llm' (random weights: the text is gibberish, the protocol is real).

  curl http://localhost:$PORT/v3/chat/completions -H "Content-Type: application/json" \\
    -d '{"model": "tiny-llm", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 30}'

  .venv/bin/python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="http://localhost:$PORT/v3", api_key="unused")
for chunk in client.chat.completions.create(model="tiny-llm", messages=[{"role": "user", "content": "hello"}],
                                            max_tokens=30, stream=True, extra_body={"top_k": 1}):
    print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
PY

Press Ctrl+C to stop.
TXT
wait $server

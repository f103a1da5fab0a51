#!/usr/bin/env bash
# Install, build the offline demo models if absent, and serve tiny-llm, tiny-image, tiny-whisper and
# tiny-speecht5 on port ${PORT:-8000}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1
python scripts/make_demo_models.py models
PORT=${PORT:-8000}
# One OVMS config.json: tiny-llm through a minimal LLM graph, tiny-image through its own (OVMS's) graph.
mkdir -p models/demo/tiny-llm
cat > models/demo/tiny-llm/graph.pbtxt <<'PBTXT'
node: { calculator: "HttpLLMCalculator"
  node_options: { [type.googleapis.com / mediapipe.LLMCalculatorOptions]: { models_path: "../../tiny-llm" enable_prefix_caching: true } } }
PBTXT
# The speech models through OVMS's speech graphs: transcription (S2t) and speech (T2s).
speech_graph() {  # NAME CALCULATOR: models/demo/NAME/graph.pbtxt serving models/NAME
  mkdir -p "models/demo/$1"
  cat > "models/demo/$1/graph.pbtxt" <<PBTXT
input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"
node: { name: "$2Executor" calculator: "$2Calculator"
  input_stream: "HTTP_REQUEST_PAYLOAD:input" output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  node_options: { [type.googleapis.com / mediapipe.$2CalculatorOptions]: { models_path: "../../$1" } } }
PBTXT
}
speech_graph tiny-whisper S2t
speech_graph tiny-speecht5 T2s
cat > models/demo/config.json <<'JSON'
{"mediapipe_config_list": [{"name": "tiny-llm", "base_path": "tiny-llm"}, {"name": "tiny-image", "base_path": "../tiny-image"},
  {"name": "tiny-whisper", "base_path": "tiny-whisper"}, {"name": "tiny-speecht5", "base_path": "tiny-speecht5"}]}
JSON
ovserve serve --config_path models/demo/config.json --port "$PORT" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' INT TERM EXIT
until curl -sf "http://localhost:$PORT/v2/health/ready" >/dev/null; do
  kill -0 $server 2>/dev/null || { echo "ovserve exited during startup" >&2; exit 1; }
  sleep 0.5
done
cat <<TXT

ovserve is serving the demo models 'tiny-llm', 'tiny-image', 'tiny-whisper' and 'tiny-speecht5' (random
weights: the text is gibberish, the pictures and the speech are noise; the protocol is real).

Open http://localhost:$PORT/ in a browser for the console: models, traffic, a chat, transcription, speech
and image playground, logs.

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

  curl http://localhost:$PORT/v3/images/generations -H "Content-Type: application/json" \\
    -d '{"model": "tiny-image", "prompt": "a red lighthouse", "size": "256x256"}' | head -c 200; echo

  .venv/bin/python - <<'PY'
import base64
from openai import OpenAI
client = OpenAI(base_url="http://localhost:$PORT/v3", api_key="unused")
answer = client.images.generate(model="tiny-image", prompt="a red lighthouse", size="256x256",
                                extra_body={"num_inference_steps": 4, "rng_seed": 7})
open("lighthouse.png", "wb").write(base64.b64decode(answer.data[0].b64_json))
print("wrote lighthouse.png", answer.usage)
PY

Press Ctrl+C to stop.
TXT
wait $server

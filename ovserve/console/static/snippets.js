// The curl and OpenAI-SDK equivalents of a request made in the Try-it view. They name the key only
// as the environment variable $OVSERVE_API_KEY: the real key is never put into the page.

function base() {
  return `${location.origin}/v3`;
}

function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

// A JSON value as a Python literal (true -> True, null -> None); strings as JSON strings, which
// Python reads the same.
export function python(value, indent = "") {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
  const inner = `${indent}    `;
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[\n${value.map((item) => inner + python(item, inner)).join(",\n")},\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${python(v, inner)}`).join(",\n")},\n${indent}}`;
}

const CLIENT = `import os
from openai import OpenAI

client = OpenAI(base_url="BASE", api_key=os.environ.get("OVSERVE_API_KEY", "unused"))
`;

function client() {
  return CLIENT.replace("BASE", base());
}

const AUTH = '-H "Authorization: Bearer $OVSERVE_API_KEY"';

export function chatSnippets(body) {
  const curl = `curl -N ${base()}/chat/completions ${AUTH} \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(body, null, 2))}`;
  const { model, messages, stream, ...rest } = body;
  const fields = Object.entries(rest).map(([key, value]) => `    ${key}=${python(value, "    ")},\n`).join("");
  const sdk = `${client()}
stream = client.chat.completions.create(
    model=${python(model)},
    messages=${python(messages, "    ")},
${fields}    stream=True,
)
for chunk in stream:
    if chunk.choices:
        delta = chunk.choices[0].delta
        print(getattr(delta, "reasoning_content", None) or "", delta.content or "", sep="", end="", flush=True)
print()
`;
  return { curl, sdk };
}

export function transcriptionSnippets(model, fileName) {
  const file = fileName || "audio.wav";
  const curl = `curl ${base()}/audio/transcriptions ${AUTH} \\\n  -F model=${shellQuote(model)} -F file=@${shellQuote(file)}`;
  const sdk = `${client()}
with open(${python(file)}, "rb") as audio:
    print(client.audio.transcriptions.create(model=${python(model)}, file=audio).text)
`;
  return { curl, sdk };
}

export function speechSnippets(body) {
  const curl = `curl ${base()}/audio/speech ${AUTH} \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(body))} -o speech.${body.response_format}`;
  const { model, input, ...rest } = body;
  const fields = Object.entries(rest).map(([key, value]) => `, ${key}=${python(value)}`).join("");
  const sdk = `${client()}
answer = client.audio.speech.create(model=${python(model)}, input=${python(input)}${fields})
answer.write_to_file("speech.${body.response_format}")
`;
  return { curl, sdk };
}

export function imageSnippets(body) {
  const curl = `curl ${base()}/images/generations ${AUTH} \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(body))}`;
  const { model, prompt, size, response_format: format, ...extra } = body;
  const sdk = `import base64
${client()}
answer = client.images.generate(model=${python(model)}, prompt=${python(prompt)}, size=${python(size)},
                                response_format=${python(format)}, extra_body=${python(extra, "                                ")})
open("image.png", "wb").write(base64.b64decode(answer.data[0].b64_json))
`;
  return { curl, sdk };
}

export function embeddingSnippets(body) {
  const curl = `curl ${base()}/embeddings ${AUTH} \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(body))}`;
  const sdk = `${client()}
answer = client.embeddings.create(model=${python(body.model)}, input=${python(body.input)})
print([len(item.embedding) for item in answer.data], answer.usage)
`;
  return { curl, sdk };
}

// Rerank is not in OpenAI's API (Cohere's and vLLM's shape): plain HTTP with httpx (the OpenAI SDK installs it).
export function rerankSnippets(body) {
  const curl = `curl ${base()}/rerank ${AUTH} \\\n  -H "Content-Type: application/json" \\\n  -d ${shellQuote(JSON.stringify(body))}`;
  const sdk = `import os
import httpx

documents = ${python(body.documents)}
answer = httpx.post(
    "${base()}/rerank",
    headers={"Authorization": f"Bearer {os.environ.get('OVSERVE_API_KEY', 'unused')}"},
    json={"model": ${python(body.model)}, "query": ${python(body.query)}, "documents": documents},
).json()
for result in answer["results"]:
    print(round(result["relevance_score"], 3), documents[result["index"]])
`;
  return { curl, sdk };
}

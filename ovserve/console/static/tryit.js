// The Try-it view: one panel per task a served model has (chat, transcription, speech, image,
// embeddings, rerank),
// each calling the real API with the key and showing the equivalent curl and SDK snippets.
// Model output is hostile: it goes into the page as text only.

import { postJSON, request, sse } from "./api.js";
import { $, el, status } from "./dom.js";
import { chatSnippets, embeddingSnippets, imageSnippets, rerankSnippets, speechSnippets, transcriptionSnippets } from "./snippets.js";

// Panel -> the task whose models it offers.
const PANELS = {
  "try-chat": "text_generation", "try-transcribe": "speech_to_text", "try-speech": "text_to_speech",
  "try-image": "image_generation", "try-embed": "embeddings", "try-rerank": "rerank",
};
const SELECTS = {
  "try-chat": "chat-model", "try-transcribe": "transcribe-model", "try-speech": "speech-model",
  "try-image": "image-model", "try-embed": "embed-model", "try-rerank": "rerank-model",
};

// The non-empty lines of a textarea.
function lines(id) {
  return $(id).value.split("\n").map((line) => line.trim()).filter(Boolean);
}

function cosine(a, b) {
  let dot = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i += 1) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return aa && bb ? dot / Math.sqrt(aa * bb) : 0;
}

function number(id) {
  const value = $(id).value.trim();
  return value === "" ? undefined : Number(value);
}

function showSnippets(prefix, { curl, sdk }) {
  $(`${prefix}-curl`).textContent = curl;
  $(`${prefix}-python`).textContent = sdk;
}

function fillSelect(select, names) {
  const chosen = select.value;
  select.replaceChildren(...names.map((name) => el("option", { value: name, text: name })));
  if (names.includes(chosen)) select.value = chosen;
}

export class TryView {
  constructor() {
    this.messages = [];
    this.controller = null;
    this.recorder = null;
    $("chat-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.chat().catch((error) => status(`chat: ${error.message}`));
    });
    $("chat-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("chat-form").requestSubmit();
    });
    $("chat-stop").addEventListener("click", () => this.controller && this.controller.abort());
    $("chat-clear").addEventListener("click", () => this.clearChat());
    $("transcribe-send").addEventListener("click", () => {
      const file = $("transcribe-file").files[0];
      if (!file) return status("choose an audio file first");
      this.transcribe(file, file.name).catch((error) => status(`transcription: ${error.message}`));
    });
    $("speech-send").addEventListener("click", () => this.speak().catch((error) => status(`speech: ${error.message}`)));
    $("image-send").addEventListener("click", () => this.image().catch((error) => status(`image: ${error.message}`)));
    $("embed-send").addEventListener("click", () => this.embed().catch((error) => status(`embeddings: ${error.message}`)));
    $("rerank-send").addEventListener("click", () => this.rerank().catch((error) => status(`rerank: ${error.message}`)));
    this.setUpRecording();
  }

  // The served models changed: offer each panel only when some model serves its task.
  models(list, info) {
    const task = new Map(info.models.map((model) => [model.id, model.task]));
    let shown = 0;
    for (const [panel, wanted] of Object.entries(PANELS)) {
      const names = list.filter((model) => task.get(model.parent || model.id) === wanted).map((model) => model.id);
      fillSelect($(SELECTS[panel]), names);
      $(panel).hidden = names.length === 0;
      shown += names.length ? 1 : 0;
    }
    $("try-none").hidden = shown > 0 || list.length === 0;
  }

  // The key was refused: nothing the last key could see stays on the page.
  forget() {
    this.clearChat();
    for (const node of document.querySelectorAll("#view-try pre, #transcribe-output")) node.textContent = "";
    $("image-output").hidden = true;
    $("image-output").removeAttribute("src");
  }

  clearChat() {
    this.messages = [];
    $("chat-transcript").replaceChildren();
    this.resetAnswer();
  }

  resetAnswer() {
    $("chat-output").textContent = "";
    $("chat-reasoning").textContent = "";
    $("chat-reasoning").hidden = true;
    $("chat-tool-calls").textContent = "";
    $("chat-tool-calls").hidden = true;
  }

  async chat() {
    const text = $("chat-input").value.trim();
    if (!text) return;
    let tools;
    const toolsText = $("chat-tools").value.trim();
    if (toolsText) {
      try {
        tools = JSON.parse(toolsText);
      } catch (error) {
        throw new Error(`the tools are not JSON: ${error.message}`);
      }
    }
    // The last answer joins the transcript; the new one streams into chat-output.
    const previous = $("chat-output").textContent;
    if (this.messages.length && this.messages[this.messages.length - 1].role === "assistant") {
      $("chat-transcript").append(el("div", { class: "turn" }, el("span", { class: "who", text: "assistant" }), previous));
    }
    this.resetAnswer();
    this.messages.push({ role: "user", content: text });
    $("chat-transcript").append(el("div", { class: "turn" }, el("span", { class: "who", text: "user" }), text));
    $("chat-input").value = "";
    const body = {
      model: $("chat-model").value,
      messages: this.messages,
      temperature: number("chat-temperature"),
      max_tokens: number("chat-max-tokens"),
      top_p: number("chat-top-p"),
      ...(tools ? { tools, tool_choice: $("chat-tool-choice").value } : {}),
      stream: true,
    };
    for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key];
    showSnippets("chat", chatSnippets(JSON.parse(JSON.stringify(body))));
    this.controller = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    const output = $("chat-output");
    const reasoning = $("chat-reasoning");
    const calls = [];
    let content = "";
    try {
      const response = await request("/v3/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: this.controller.signal,
      });
      for await (const chunk of sse(response)) {
        if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (!delta) continue;
        if (delta.reasoning_content) {
          reasoning.hidden = false;
          reasoning.textContent += delta.reasoning_content;
        }
        if (delta.content) {
          content += delta.content;
          output.textContent = content;
        }
        for (const call of delta.tool_calls || []) {
          const held = (calls[call.index || 0] ||= { id: call.id, type: "function", function: { name: "", arguments: "" } });
          if (call.function && call.function.name) held.function.name += call.function.name;
          if (call.function && call.function.arguments) held.function.arguments += call.function.arguments;
          $("chat-tool-calls").hidden = false;
          $("chat-tool-calls").textContent = calls.map((c) => `${c.function.name}(${c.function.arguments})`).join("\n");
        }
      }
      status("");
    } catch (error) {
      if (error.name !== "AbortError") throw error;
    } finally {
      this.controller = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
      const answer = { role: "assistant", content };
      if (calls.length) answer.tool_calls = calls.filter(Boolean);
      this.messages.push(answer);
    }
  }

  async transcribe(blob, fileName) {
    const model = $("transcribe-model").value;
    const form = new FormData();
    form.append("model", model);
    form.append("file", blob, fileName);
    showSnippets("transcribe", transcriptionSnippets(model, fileName));
    $("transcribe-output").textContent = "…";
    const answer = await (await request("/v3/audio/transcriptions", { method: "POST", body: form })).json();
    $("transcribe-output").textContent = answer.text;
    status("");
  }

  setUpRecording() {
    // The microphone where the browser has one and allows it (https or localhost only).
    if (!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia && window.MediaRecorder)) return;
    const button = $("transcribe-record");
    button.hidden = false;
    button.addEventListener("click", async () => {
      if (this.recorder) {
        this.recorder.stop();
        return;
      }
      try {
        const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
        const chunks = [];
        const recorder = new MediaRecorder(stream);
        recorder.addEventListener("dataavailable", (event) => chunks.push(event.data));
        recorder.addEventListener("stop", () => {
          stream.getTracks().forEach((track) => track.stop());
          this.recorder = null;
          button.textContent = "Record";
          const type = recorder.mimeType || "audio/webm";
          const extension = type.includes("ogg") ? "ogg" : type.includes("mp4") ? "mp4" : "webm";
          this.transcribe(new Blob(chunks, { type }), `recording.${extension}`).catch((error) => status(`transcription: ${error.message}`));
        });
        recorder.start();
        this.recorder = recorder;
        button.textContent = "Stop recording";
      } catch (error) {
        status(`microphone: ${error.message}`);
      }
    });
  }

  async speak() {
    const body = { model: $("speech-model").value, input: $("speech-input").value, response_format: "wav" };
    const voice = $("speech-voice").value.trim();
    if (voice) body.voice = voice;
    showSnippets("speech", speechSnippets(body));
    const audio = $("speech-audio");
    const blob = await (await request("/v3/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    })).blob();
    if (audio.src) URL.revokeObjectURL(audio.src);
    audio.src = URL.createObjectURL(blob);
    status("");
    try {
      await audio.play();
    } catch (error) {
      status(`the answer is ready; press play (${error.message})`, "info");
    }
  }

  async image() {
    const body = {
      model: $("image-model").value,
      prompt: $("image-prompt").value,
      size: $("image-size").value,
      response_format: "b64_json",
      num_inference_steps: number("image-steps"),
    };
    showSnippets("image", imageSnippets(body));
    const answer = await postJSON("/v3/images/generations", body);
    const image = $("image-output");
    image.src = `data:image/png;base64,${answer.data[0].b64_json}`;
    image.hidden = false;
    status("");
  }

  // Each line embedded; shown as each vector's size and the lines' pairwise cosine similarities.
  async embed() {
    const body = { model: $("embed-model").value, input: lines("embed-input") };
    if (!body.input.length) return status("write at least one line to embed");
    showSnippets("embed", embeddingSnippets(body));
    const answer = await postJSON("/v3/embeddings", body);
    const vectors = answer.data.map((item) => item.embedding);
    const report = [`${vectors.length} vectors of ${vectors[0].length} dimensions; ${answer.usage.prompt_tokens} prompt tokens`];
    for (let i = 0; i < vectors.length; i += 1) {
      for (let j = i + 1; j < vectors.length; j += 1) {
        report.push(`cosine(line ${i + 1}, line ${j + 1}) = ${cosine(vectors[i], vectors[j]).toFixed(3)}`);
      }
    }
    $("embed-output").textContent = report.join("\n");
    status("");
  }

  // The lines ranked against the query, best first.
  async rerank() {
    const body = { model: $("rerank-model").value, query: $("rerank-query").value, documents: lines("rerank-documents") };
    if (!body.documents.length) return status("write at least one line to rank");
    showSnippets("rerank", rerankSnippets(body));
    const answer = await postJSON("/v3/rerank", body);
    $("rerank-output").textContent = answer.results
      .map((result) => `${result.relevance_score.toFixed(3)}  ${body.documents[result.index]}`)
      .join("\n");
    status("");
  }
}

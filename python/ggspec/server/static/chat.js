// The chat page: streams a reply from /v1/chat/completions and shows what
// speculation did (live tokens/s while it streams; acceptance and drafts from
// the final chunk's timings). No build step: plain browser JavaScript.
"use strict";

const $ = (id) => document.getElementById(id);
const history = [];  // the conversation, as the API takes it

function headers() {
  const key = $("api-key").value || localStorage.getItem("ggspec-api-key") || "";
  const h = { "Content-Type": "application/json" };
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function showModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const body = await r.json();
    $("model").textContent = r.ok ? body.data[0].id : body.error.message;
  } catch (e) {
    $("model").textContent = "server unreachable";
  }
}

function addMessage(role, text) {
  const li = document.createElement("li");
  li.className = role;
  const content = document.createElement("span");
  content.className = "content";
  content.textContent = text;
  li.appendChild(content);
  $("messages").appendChild(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function statsLine(t) {
  const parts = [`${t.predicted_n} tokens at ${t.predicted_per_second.toFixed(1)} tok/s`,
                 `prompt ${t.prompt_n} (+${t.cache_n} cached)`, `spec ${t.spec_type}`];
  if (t.draft_n > 0) {
    parts.push(`accepted ${t.draft_n_accepted}/${t.draft_n} drafts ` +
               `(${(100 * t.draft_n_accepted / t.draft_n).toFixed(0)}%, ` +
               `${t.mean_acceptance_length.toFixed(2)} tokens per verify)`);
  }
  if (t.spec_decline_reason) parts.push(`declined: ${t.spec_decline_reason}`);
  return parts.join(" · ");
}

function requestBody() {
  const body = { messages: history, stream: true, stream_options: { include_usage: true } };
  const temperature = $("temperature").value, seed = $("seed").value, max = $("max-tokens").value;
  if (temperature !== "") body.temperature = Number(temperature);
  if (seed !== "") body.seed = Number(seed);
  if (max !== "") body.max_tokens = Number(max);
  if ($("spec").value) body.speculative = { type: $("spec").value };
  return body;
}

async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!line.startsWith("data: ")) continue;
      const data = line.slice(6);
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const li = addMessage("assistant", "");
  const content = li.querySelector(".content");
  $("send").disabled = true;
  let reply = "", pieces = 0, first = null;
  try {
    const response = await fetch("/v1/chat/completions",
                                 { method: "POST", headers: headers(), body: JSON.stringify(requestBody()) });
    if (!response.ok) throw new Error((await response.json()).error.message);
    for await (const chunk of events(response)) {
      if (chunk.error) throw new Error(chunk.error.message);
      const delta = chunk.choices.length ? chunk.choices[0].delta.content : null;
      if (delta) {
        reply += delta;
        content.textContent = reply;
        pieces += 1;
        first = first || performance.now();
        const seconds = (performance.now() - first) / 1000;
        // a piece is about a token's text (a character split over tokens, or text held back
        // while it may begin a stop string, comes with a later one); the exact rate is in the timings
        if (seconds > 0) $("live").textContent = `≈ ${(pieces / seconds).toFixed(1)} tok/s while streaming`;
      }
      if (chunk.timings) {
        const stats = document.createElement("span");
        stats.className = "stats";
        stats.textContent = statsLine(chunk.timings);
        li.appendChild(stats);
        $("live").textContent = "";
      }
    }
    history.push({ role: "assistant", content: reply });
  } catch (e) {
    li.className = "assistant error";
    content.textContent = reply + (reply ? "\n" : "") + "Error: " + e.message;
    history.pop();
  } finally {
    li.dataset.done = "1";
    $("send").disabled = false;
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || $("send").disabled) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("api-key").addEventListener("change", () => {
  localStorage.setItem("ggspec-api-key", $("api-key").value);
  showModel();
});
$("clear").addEventListener("click", () => {
  history.length = 0;
  $("messages").textContent = "";
});
$("api-key").value = localStorage.getItem("ggspec-api-key") || "";
showModel();

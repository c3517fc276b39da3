// A follower's live view (classroom/page.py mounts it once; Streamlit runs no script for it afterwards).
//
// It opens the class's event stream (/class/CODE/events: classroom/http.py) and draws each frame the
// server pushes: a step's stage and view (pictures built once per server), or another page's elements.
// The student's own pickers, ‹ › and Live act here, at once, on what the page already holds; a picture
// not yet held is fetched once (the browser keeps it). Every word a visitor typed is set as text, never
// as markup; HTML comes only from the server, which made it and escaped what it holds.

const VIEWS_WITH_LAYER = new Set(["Attention", "Matmuls"]);
const PHONE = window.matchMedia("(max-width: 700px)");  // ui/style.py's phone: the page stacks

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e[k] = v; else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgNode(text) {
  // The server's stage (engine/draw/stage.py: every word escaped there), placed in the page itself. As an
  // <img> it costs each tab a document of its own on every step; inline, one parse. Nothing in it can run:
  // it is parsed as SVG (no HTML), and any script, foreign HTML or on* attribute is dropped before it is placed.
  const root = new DOMParser().parseFromString(text, "image/svg+xml").documentElement;
  if (!root || root.namespaceURI !== "http://www.w3.org/2000/svg" || root.localName !== "svg") return null;
  for (const n of root.querySelectorAll("script, foreignObject")) n.remove();
  for (const n of [root, ...root.querySelectorAll("*")]) {
    for (const a of [...n.attributes]) {
      if (/^on/i.test(a.name) || /^\s*javascript:/i.test(a.value)) n.removeAttribute(a.name);
    }
  }
  return document.importNode(root, true);
}

let plotlyLoading = null;
function plotly() {  // plotly's own bundle, served by this server, loaded the first time a chart is shown
  if (!plotlyLoading) {
    plotlyLoading = new Promise((resolve, reject) => {
      if (window.Plotly) { resolve(window.Plotly); return; }
      const s = el("script", { src: "/class/static/plotly.min.js" });
      s.onload = () => resolve(window.Plotly);
      s.onerror = reject;
      document.head.appendChild(s);
    });
  }
  return plotlyLoading;
}

function fitChart(spec, width) {
  // A follower's chart is drawn by plotly.js alone, without the Streamlit theme the lecturer's page has: each axis
  // makes room for its tick labels and its title (automargin: nothing cut, no title over the ticks). On a phone
  // every text (titles, ticks, legend, notes, the points' names) comes back from the size the lecturer's screen
  // drew it at (meta.dl_scale: a projector's is larger, ui/charts.py) to a little under a page's, never under
  // 11 px; a long title wraps instead of running off both sides, and a short chart gets the height its legend and
  // margins need. Returns {data, layout} for Plotly.newPlot.
  const layout = JSON.parse(JSON.stringify(spec.layout || {}));
  const data = JSON.parse(JSON.stringify(spec.data || []));
  const drawnAt = (layout.meta && layout.meta.dl_scale) || 1;
  const narrow = width < 600, shrink = narrow ? 0.82 / drawnAt : 1;
  const smaller = (font, size) => Object.assign(font || {},
    { size: Math.max(narrow ? 11 : 0, Math.round((font && font.size || size) * shrink)) });  // never under 11 px
  const base = (layout.font && layout.font.size) || 12;  // a text of no size of its own: the page's, as drawn
  layout.font = smaller(layout.font, 12);
  const cells = (spec.data || []).some((t) => t.type === "heatmap");  // rows and columns of cells, no values on axes
  for (const key of Object.keys(layout)) {
    if (!/^[xy]axis\d*$/.test(key)) continue;
    const axis = layout[key];
    axis.automargin = true;
    if (cells) Object.assign(axis, { zeroline: false, showgrid: false });  // as the lecturer's theme draws it: no
    // line across the first row, no grid over the masked cells
    if (typeof axis.title === "string") axis.title = { text: axis.title };
    if (axis.title && axis.title.text) axis.title.standoff = 6;
    if (narrow && axis.title && axis.title.text) axis.title.font = smaller(axis.title.font, base);
    if (narrow && axis.tickfont && axis.tickfont.size) axis.tickfont = smaller(axis.tickfont, base);
  }
  if (layout.legend) layout.legend.font = smaller(layout.legend.font, base);
  for (const a of layout.annotations || []) if (narrow) a.font = smaller(a.font, base);  // a note: 11 px
  for (const t of data) if (narrow && t.textfont && t.textfont.size) t.textfont = smaller(t.textfont, base);
  const title = layout.title && (typeof layout.title === "string" ? { text: layout.title } : layout.title);
  let extra = 0;
  if (narrow && title && title.text) {
    title.font = smaller(title.font, 17);
    const chars = Math.max(16, Math.floor(width / (title.font.size * 0.56)));
    const lines = wrapWords(title.text.replace(/<br>/g, " "), chars);
    title.text = lines.join("<br>");
    extra = (lines.length - 1) * title.font.size * 1.25;
    const sub = title.subtitle;
    if (sub && sub.text) {  // its own lines (a recording's device and date, which rungs are random), each wrapped
      sub.font = smaller(sub.font, base);
      const was = sub.text.split("<br>");
      const subLines = was.flatMap((line) => wrapWords(line, Math.max(16, Math.floor(width / (sub.font.size * 0.56)))));
      sub.text = subLines.join("<br>");
      extra += (subLines.length - was.length) * sub.font.size * 1.25;
    }
    layout.title = title;
  }
  if (narrow) {
    layout.margin = Object.assign({}, layout.margin, { l: 4, r: 4, t: Math.round(((layout.margin || {}).t || 40) + extra) });
    layout.height = Math.round(Math.max(layout.height || 300, 300) + extra);
  }
  return { data, layout };
}

function wrapWords(text, width) {
  // words in lines of at most `width` characters (a plotly title has no wrapping of its own)
  const lines = [];
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (lines.length && lines[lines.length - 1].length + 1 + word.length <= width) lines[lines.length - 1] += " " + word;
    else lines.push(word);
  }
  return lines;
}

class Follower {
  constructor(root, data, setTrigger) {
    this.root = root;
    this.code = data.code;
    this.who = data.who;
    this.base = `/class/${data.code}/`;
    this.setTrigger = setTrigger;
    this.timeline = [];          // [[frame id, label], ...] oldest first
    this.opened = new Set();     // the folded sections (expanders) this student opened, by label
    this.frames = new Map();     // frame id -> its manifest
    this.parts = new Map();      // picture path -> its text (SVG, or a view's JSON)
    this.live = null;            // the newest event: {v, frame, picks, poll, published}
    this.looking = null;         // a frame id while the student looks back; null: live
    this.picks = { view: "Attention", layer: 0, head: 0 };
    this.own = new Set();        // pickers the student touched (the others follow the lecturer's)
    this.voted = new Map();      // question id -> what the server said
    this.drawn = 0;              // a counter: a newer draw wins over a slower older one
    this.build();
    this.connect();
    this.onScreen = () => { if (this.live) this.render(); };  // turned, or resized past a phone's width
    PHONE.addEventListener("change", this.onScreen);
  }

  build() {
    const r = this.root;
    this.bar = el("div", { class: "dlf-bar" });
    this.where = el("span", { class: "dlf-where", "data-testid": "dl-follow-where" });
    this.back = el("button", { class: "dlf-btn", "aria-label": "One step back", title: "One step back",
      "data-testid": "dl-follow-back", onclick: () => this.move(-1) }, "‹");
    this.fwd = el("button", { class: "dlf-btn", "aria-label": "One step forward", title: "One step forward",
      "data-testid": "dl-follow-forward", onclick: () => this.move(1) }, "›");
    this.liveBtn = el("button", { class: "dlf-btn", "data-testid": "dl-follow-live",
      title: "Back to the lecturer's screen", onclick: () => this.goLive() }, "Live");
    this.forkBtn = el("button", { class: "dlf-btn", "data-testid": "dl-follow-fork",
      title: "Continue this run on your own from the step shown: the same prompt and settings are replayed " +
             "in your session, so the tokens match the lecturer's; the lecturer's run is not touched.",
      onclick: () => this.fork() }, "Fork");
    this.bar.append(this.where, this.back, this.fwd, this.liveBtn, this.forkBtn);
    this.pickers = el("div", { class: "dlf-pickers" });
    this.poll = el("div", { class: "dlf-poll-box", "data-testid": "dl-follow-poll" });
    this.body = el("div", { class: "dlf-body" });
    r.append(this.bar, this.poll, this.pickers, this.body);
    this.where.textContent = `Following class ${this.code} · connecting…`;
  }

  connect() {
    this.es = new EventSource(`${this.base}events?who=${encodeURIComponent(this.who)}`);
    this.es.addEventListener("live", (e) => this.onLive(JSON.parse(e.data)));
    this.es.addEventListener("end", () => this.ended());
    this.es.onerror = () => {
      if (this.gone) return;
      if (this.es.readyState === EventSource.CLOSED) {  // refused (the class ended, or this page left it)
        this.where.textContent = `Class ${this.code} · not following any more: open the class's link again.`;
      } else {
        this.where.textContent = `Class ${this.code} · reconnecting…`;
      }
    };
  }

  close() {
    this.gone = true;
    PHONE.removeEventListener("change", this.onScreen);
    if (this.es) this.es.close();
  }

  ended() {
    this.close();
    this.root.replaceChildren(el("div", { class: "dlf-note", "data-testid": "dl-follow-ended" },
      "This class has ended. Thank you for following!"));
  }

  onLive(msg) {
    if (this.live && msg.v <= this.live.v && !msg.timeline) return;
    for (const [path, text] of Object.entries(msg.parts || {})) this.parts.set(path, text);
    if (msg.frame) this.keepFrame(msg.frame);
    if (msg.timeline) this.timeline = msg.timeline;
    if (msg.entry && !this.timeline.some((t) => t[0] === msg.entry[0])) this.timeline.push(msg.entry);
    if (this.timeline.length > 400) this.timeline.splice(0, this.timeline.length - 400);
    this.live = msg;
    for (const name of ["view", "layer", "head"]) {
      if (!this.own.has(name) && msg.picks && msg.picks[name] !== undefined) this.picks[name] = msg.picks[name];
    }
    this.picks.every = !!(msg.picks && msg.picks.every);  // the lecturer's "every query row" (Attention only)
    this.picks.steps = !!(msg.picks && msg.picks.steps);  // and "one head, every step so far"
    this.drawPoll();
    if (this.looking === null) this.render(); else this.drawBar();
  }

  // ---------------------------------------------------------------- where the student looks

  shownId() { return this.looking !== null ? this.looking : (this.live && this.live.frame ? this.live.frame.id : null); }

  move(delta) {
    const ids = this.timeline.map((t) => t[0]);
    const i = ids.indexOf(this.shownId());
    const j = i < 0 ? ids.length - 1 : i + delta;
    if (j < 0 || j >= ids.length) return;
    this.looking = ids[j] === (this.live.frame && this.live.frame.id) ? null : ids[j];
    this.render();
  }

  goLive() { this.looking = null; this.render(); }

  fork() {
    const f = this.frames.get(this.shownId());
    if (f && f.kind === "step") this.setTrigger("fork", { run: f.run, at: f.at });
  }

  async frameOf(id) {
    if (this.frames.has(id)) return this.frames.get(id);
    const r = await fetch(`${this.base}frame/${encodeURIComponent(id)}`);
    if (!r.ok) return null;
    const f = await r.json();
    this.keepFrame(f);
    return f;
  }

  keepFrame(f) {  // the newest few hundred (a lesson's frame can hold charts): older ones are fetched again
    this.frames.delete(f.id);
    this.frames.set(f.id, f);
    if (this.frames.size > 300) this.frames.delete(this.frames.keys().next().value);
  }

  drawBar() {
    const live = this.live, ids = this.timeline.map((t) => t[0]);
    const shown = this.shownId(), i = ids.indexOf(shown);
    const liveLabel = live && live.frame ? `${live.frame.page} · ${live.frame.label}` : "";
    const frame = this.frames.get(shown);
    this.where.textContent = `Following class ${this.code} · ` + (this.looking === null
      ? `live: ${liveLabel}` : `looking back at ${frame ? frame.page + " · " + frame.label : "an earlier screen"}` +
        ` (the lecturer is at ${liveLabel})`);
    this.where.dataset.looking = this.looking === null ? "live" : "back";
    this.back.disabled = i <= 0;
    this.fwd.disabled = i < 0 || i >= ids.length - 1;
    this.liveBtn.disabled = this.looking === null;
    this.forkBtn.style.display = frame && frame.kind === "step" ? "" : "none";
  }

  // ---------------------------------------------------------------- drawing

  async render() {
    // everything a screen needs is fetched and decoded first, then the page changes in one go: one layout,
    // one paint per step in the student's tab
    const token = ++this.drawn;
    const id = this.shownId();
    const frame = id === null ? null : await this.frameOf(id);
    if (token !== this.drawn) return;  // the student (or the lecturer) moved on meanwhile
    this.drawPoll();  // the question shows where its step does
    if (!frame || frame.kind !== "step") this.drawBar();
    if (!frame) {
      this.pickers.replaceChildren();
      this.body.replaceChildren(el("div", { class: "dlf-note" }, "Waiting for the lecturer…"));
      return;
    }
    if (frame.kind === "step") return this.drawStep(frame, token);
    this.pickers.replaceChildren();
    if (frame.kind === "waiting") {
      this.body.replaceChildren(el("div", { class: "dlf-note" },
        "The lecturer has not pressed Prefill yet: this page shows each step as soon as it is taken."));
      return;
    }
    const box = el("div", { class: "dlf-page", "data-testid": "dl-follow-page", "data-frame": frame.id });
    this.drawNodes(frame.nodes || [], box);  // the bar above names the page and its screen: said once there
    this.body.replaceChildren(box);
    this.step = null;
    this.stamp(box, frame, token);
  }

  drawPickers(frame) {
    // built once per shape of run (layers, heads, views); a step or a pick only moves the highlight
    const p = this.picks, shape = `${frame.layers}/${frame.heads}/${frame.views.join(",")}`;
    if (this.pickerShape !== shape || !this.pickers.firstChild) {
      this.pickerShape = shape;
      const row = el("div", { class: "dlf-picker-row" });
      const pick = (name, value) => { this.own.add(name); p[name] = value; this.render(); };
      const layers = el("span", { class: "dlf-seg", role: "group", "aria-label": "layer" });
      for (let l = 0; l < frame.layers; l++) {
        layers.append(el("button", { class: "dlf-btn", "data-layer": l, onclick: () => pick("layer", l) }, `layer ${l}`));
      }
      this.headSelect = el("select", { class: "dlf-select", "aria-label": "head", title: "The head the stage draws",
        onchange: (e) => pick("head", Number(e.target.value)) });
      for (let h = 0; h < frame.heads; h++) this.headSelect.append(el("option", { value: h }, `head ${h}`));
      const views = el("span", { class: "dlf-seg", role: "radiogroup", "aria-label": "view" });
      for (const v of frame.views) {
        views.append(el("button", { class: "dlf-btn", role: "radio", "data-view": v, onclick: () => pick("view", v) }, v));
      }
      row.append(layers, this.headSelect, views);
      this.pickers.replaceChildren(row);
    }
    for (const b of this.pickers.querySelectorAll("[data-layer]")) {
      b.classList.toggle("dlf-on", Number(b.dataset.layer) === p.layer);
    }
    for (const b of this.pickers.querySelectorAll("[data-view]")) {
      b.classList.toggle("dlf-on", b.dataset.view === p.view);
      b.setAttribute("aria-checked", b.dataset.view === p.view ? "true" : "false");
    }
    this.headSelect.value = String(p.head);
  }

  async part(path) {
    if (this.parts.has(path)) return this.parts.get(path);
    const r = await fetch(this.base + path);
    if (!r.ok) return null;
    const text = await r.text();
    this.parts.set(path, text);
    if (this.parts.size > 300) this.parts.delete(this.parts.keys().next().value);
    return text;
  }

  stepNodes() {
    // the step's layout, made once and kept: a step swaps the picture and the view, nothing else moves
    if (this.step && this.body.firstChild === this.step.grid) return this.step;
    const grid = el("div", { class: "dlf-grid" });
    const left = el("div", { class: "dlf-left" }), right = el("div", { class: "dlf-right" });
    const stage = el("div", { class: "dl-stage", "data-testid": "dl-follow-stage" });
    const picture = el("div");  // the stage's picture: an inline <svg> once the first step is drawn
    stage.append(picture);
    stage.addEventListener("click", (e) => {  // the stage's layer boxes open their layer, as the pickers above do
      const box = e.target.closest && e.target.closest("[data-role=layer]");
      if (!box) return;
      this.own.add("layer");
      this.picks.layer = Number(box.dataset.layer);
      this.render();
    });
    const text = el("div", { class: "dl-text", "data-testid": "dl-text" });
    const status = el("div", { class: "dlf-status" }), view = el("div", { class: "dlf-view" });
    left.append(stage, text);
    right.append(status, view);
    grid.append(left, right);
    this.body.replaceChildren(grid);
    this.step = { grid, stage, picture, text, status, view, viewText: null, svg: null };
    return this.step;
  }

  async drawStep(frame, token) {
    const p = this.picks;
    p.layer = Math.min(p.layer, frame.layers - 1);
    p.head = Math.min(p.head, frame.heads - 1);
    if (!frame.views.includes(p.view)) p.view = frame.views[0];
    const at = `p/${frame.run}/${frame.at}/`;
    const phone = PHONE.matches;  // the stage laid out for a phone: whole on the screen, no word under 11 px
    const attention = p.view === "Attention";
    const [svg, shown, steps] = await Promise.all([this.part(`${at}${phone ? "phone" : "stage"}/${p.layer}/${p.head}`),
      this.part(`${at}${p.every && attention ? "rows" : "view"}/${frame.views.indexOf(p.view)}/` +
        `${VIEWS_WITH_LAYER.has(p.view) ? p.layer : 0}`),
      p.steps && attention ? this.part(`${at}steps/${p.layer}/${p.head}`) : null]);
    const view = shown && steps ? JSON.stringify({ blocks: [...JSON.parse(shown).blocks, ...JSON.parse(steps).blocks] })
      : shown;  // the lecturer's "one head, every step so far", under the view as on the lecturer's page
    if (token !== this.drawn) return;
    let viewBox = null, next = null;
    const waits = [], charts = [];
    if (svg !== (this.step && this.step.svg)) {  // the new picture parsed aside, then put in place
      next = (svg && svgNode(svg)) || el("div", { class: "dlf-note" }, "This step's picture is not available: press Live.");
    }
    if (view !== (this.step && this.step.viewText)) {  // the view built aside, its pictures decoded, then swapped in
      viewBox = el("div", { class: "dlf-view" });
      if (view) this.drawBlocks(JSON.parse(view).blocks, viewBox, charts);
      else viewBox.append(el("div", { class: "dlf-note" }, "This step is no longer available: press Live."));
      for (const img of viewBox.querySelectorAll("img")) waits.push(img.decode());
    }
    await Promise.allSettled(waits);  // an empty or broken picture: show what there is
    if (token !== this.drawn) return;
    this.drawBar();
    this.drawPickers(frame);
    const n = this.stepNodes();
    n.stage.classList.toggle("dl-stage-fits", phone);
    if (next !== null) {
      n.picture.replaceWith(next);  // parsed already: one swap, one layout
      n.picture = next;
      n.svg = svg;
    }
    n.text.textContent = frame.text || "";
    n.status.innerHTML = frame.status;  // made by the server from numbers (classroom/frames.py)
    if (viewBox !== null) {
      n.view.replaceWith(viewBox);
      n.view = viewBox;
      n.viewText = view;
      for (const draw of charts) draw();
    }
    this.stamp(n.stage, frame, token);
  }

  stamp(node, frame, token) {
    // when this screen was drawn, for tests/load_follow.py: which step, and when the server published it
    node.dataset.step = frame.kind === "step" ? String(frame.at) : frame.id;
    if (this.looking === null && this.live) node.dataset.published = String(this.live.published);
  }

  drawBlocks(blocks, into, later = null) {
    // later: a list to put each chart's drawing in, for after `into` is on the page (plotly measures its box)
    for (const b of blocks) {
      if (b.kind === "figure") {
        const div = el("div", { class: "dlf-figure" });
        into.append(div);
        const draw = () => plotly().then((P) => {
          const fit = fitChart(b.spec, div.clientWidth);
          return P.newPlot(div, fit.data, fit.layout, { displayModeBar: false, responsive: true });
        }).catch(() => div.append("(the chart could not be drawn)"));
        if (later) later.push(draw); else draw();
      } else {
        const div = el("div", { class: `dlf-block dlf-${b.kind}` });
        div.innerHTML = b.html;  // made by the server, every visitor's word escaped there
        into.append(div);
      }
    }
  }

  drawNodes(nodes, into) {
    for (const n of nodes) {
      if (n.kind === "row") {
        const row = el("div", { class: "dlf-row" });
        // Streamlit's weights sum to 1; a column a phone wraps onto its own line fills it only if it grows by 1 or
        // more (a flex-grow of 0.42 takes 42 % of the line), so the smallest weight grows by 1, the others in step
        const least = Math.min(...n.cols.map((c) => c.w || 1));
        for (const c of n.cols) {
          const col = el("div", { class: "dlf-col" });
          col.style.flex = `${(c.w || 1) / least} 1 0`;
          this.drawNodes(c.nodes, col);
          row.append(col);
        }
        into.append(row);
      } else if (n.kind === "group" && n.fold) {  // an expander: folded as the lecturer's page draws it at first
        const g = el("details", { class: "dlf-group" });
        g.open = n.open || this.opened.has(n.label);  // one a student opened stays open as the screen changes
        g.addEventListener("toggle", () => {
          if (!g.open) { this.opened.delete(n.label); return; }
          this.opened.add(n.label);  // a chart drawn while folded had no width: fit it to the box it has now
          for (const f of g.querySelectorAll(".js-plotly-plot")) if (window.Plotly) window.Plotly.Plots.resize(f);
        });
        g.append(el("summary", { class: "dlf-group-label" }, n.label || "more"));
        this.drawNodes(n.nodes, g);
        into.append(g);
      } else if (n.kind === "group") {
        const g = el("div", { class: "dlf-group" });
        if (n.label) g.append(el("div", { class: "dlf-group-label" }, n.label));
        this.drawNodes(n.nodes, g);
        into.append(g);
      } else {
        this.drawBlocks([n], into);
      }
    }
  }

  // ---------------------------------------------------------------- the class's question

  drawPoll() {
    const q = this.live && this.live.poll;
    if (!q) { this.poll.replaceChildren(); this.poll.dataset.qid = ""; return; }
    // a question stays with its step: looking back at another step shows the step, and where the question is
    const shown = this.looking === null ? null : this.frames.get(this.looking);
    const elsewhere = shown && q.at !== undefined && !(shown.kind === "step" && shown.at === q.at) ? "1" : "0";
    if (this.poll.dataset.qid === q.qid && this.poll.dataset.open === String(q.open) &&
        this.poll.dataset.elsewhere === elsewhere) return;
    this.poll.dataset.qid = q.qid;
    this.poll.dataset.open = String(q.open);
    this.poll.dataset.elsewhere = elsewhere;
    if (elsewhere === "1") {
      this.poll.replaceChildren(el("div", { class: "dlf-note", "data-testid": "dl-follow-poll-elsewhere" },
        `The class's question is about step ${q.at}` + (q.open ? ": press Live to answer it." : ": press Live to see it.")));
      return;
    }
    const box = el("div", { class: "dlf-question" });
    box.append(el("div", { class: "dlf-q-text" }, q.text));
    if (!q.open) {
      const res = el("div", { class: "dlf-result" });
      res.innerHTML = q.html || "";  // the server's bars (classroom/poll_draw.py): words escaped there
      box.append(res);
      this.poll.replaceChildren(box);
      return;
    }
    if (q.context) box.append(el("div", { class: "dlf-q-context" }, q.context + " …"));
    const said = el("div", { class: "dlf-q-said", role: "status", "data-testid": "dl-follow-vote-said" });
    const choices = el("div", { class: "dlf-q-choices" });
    const send = (payload) => this.vote(q, payload, said, choices);
    for (const c of q.choices) {
      const b = el("button", { class: "dlf-btn dlf-choice", onclick: () => send({ choice: c }) }, c);
      b.dataset.choice = c;
      choices.append(b);
    }
    box.append(choices);
    if (q.typed) {
      const form = el("form", { class: "dlf-q-typed" });
      const input = el("input", { type: "text", maxlength: "40", placeholder: "or type a word",
        "aria-label": "your word", autocomplete: "off" });
      form.append(input, el("button", { class: "dlf-btn", type: "submit" }, "Send"));
      form.onsubmit = (e) => { e.preventDefault(); send({ word: input.value }); };
      box.append(form);
    }
    box.append(said);
    if (this.voted.has(q.qid)) { said.textContent = this.voted.get(q.qid); choices.dataset.done = "1"; }
    this.poll.replaceChildren(box);
  }

  async vote(q, payload, said, choices) {
    said.textContent = "Sending…";
    try {
      const r = await fetch(`${this.base}vote`, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ who: this.who, qid: q.qid, ...payload }) });
      const m = await r.json();
      said.textContent = m.message;  // a plain sentence from the server: set as text
      if (m.ok) {
        this.voted.set(q.qid, m.message);
        choices.dataset.done = "1";
        for (const b of choices.children) if (b.dataset.choice === payload.choice) b.classList.add("dlf-on");
      }
    } catch (e) {
      said.textContent = "Your vote could not be sent: check the connection, then try again.";
    }
  }
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let root = parentElement.querySelector(".dlf");
  if (root && root.follower && root.follower.code === data.code && !root.follower.gone) return;
  if (root) { root.follower && root.follower.close(); root.remove(); }
  root = el("div", { class: "dlf", "data-testid": "dl-follow" });
  parentElement.appendChild(root);
  root.follower = new Follower(root, data, setTriggerValue);
  return () => root.follower.close();
}

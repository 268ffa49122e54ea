// The course website's planner page (utils/course/planner_page.py writes it into the site as _static/planner/planner.js).
// It starts Pyodide from the site's own copy, writes the course's torch-free ledger (ledger.json: utils/ledger/ and
// utils/validate.py) into Pyodide's file system, and on every change of the form calls
// utils.ledger.report.plan_report, then draws what it returns: the verdict, chapter 09's panel's lines, one stacked
// bar per step against the usable budget (SVG), and the costs table.
import { loadPyodide } from "../pyodide/pyodide.mjs";

const app = document.getElementById("planner-app");
const form = document.getElementById("planner-form");
const status = document.getElementById("planner-status");
// matplotlib's tab20, the palette chapter 09's figure takes each ledger line's colour from (utils.ledger.plan)
const TAB20 = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd",
  "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf",
  "#9edae5"];
const SVG = "http://www.w3.org/2000/svg";
const CHOICES = {
  seq_len: [512, 1024, 2048, 4096, 8192],
  effective_batch: [1, 2, 4, 8, 16, 32, 64, 128, 256],
  n_gpus: [1, 2, 4, 8, 16, 32, 64],
  host_gib: [16, 32, 64, 128, 256, 512, 1024, 2048],
};
let planReport = null;
let fixedSeqLen = {};

function fill(select, values, first) {
  for (const value of values) {
    const option = document.createElement("option");
    option.value = option.textContent = String(value);
    select.append(option);
  }
  select.value = String(first);
}

function inputs() {
  const f = form.elements;
  const kw = { model: f.model.value, gpu: f.gpu.value, config: f.config.value };
  for (const name of Object.keys(CHOICES)) kw[name] = Number(f[name].value);
  for (const name of ["allow_offload", "allow_lora", "chunked_loss"]) kw[name] = f[name].checked;
  return kw;
}

function el(name, attrs = {}, text = "") {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text) node.textContent = text;
  return node;
}

function chart(bars) {
  const rowHeight = 22, top = 40, labelWidth = 270, gap = 20;
  const panelWidth = bars.panels.length > 1 ? 260 : 540;
  const legendRows = Math.ceil(bars.lines.length / 3);
  const height = top + 10 + rowHeight * bars.steps.length + 16 * legendRows + 20;
  const width = labelWidth + bars.panels.length * (panelWidth + gap);
  // drawn in its own units, scaled to the page's column down to 640 px wide (the page's CSS), below which the chart
  // scrolls sideways; text and lines take the theme's colour (currentColor), so they show in the dark theme too
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", fill: "currentColor",
    "aria-label": "one bar per step of the plan against the usable budget (the steps' totals are listed below)" });
  bars.steps.forEach(([label], row) => {  // a long step's label shortened, whole in its tooltip
    const text = el("text", { x: labelWidth - 6, y: top + row * rowHeight + 12, "text-anchor": "end",
      "font-size": 11 }, label.length > 46 ? label.slice(0, 45) + "\u2026" : label);
    text.append(el("title", {}, label));
    svg.append(text);
  });
  bars.panels.forEach(([kind, limit], i) => {
    const x0 = labelWidth + i * (panelWidth + gap), scale = panelWidth / limit;
    bars.steps.forEach(([, parts], row) => {
      let left = 0;
      const y = top + row * rowHeight;
      for (const line of bars.lines) {
        const w = parts[line] || 0;
        if (w <= 0 || left >= limit) { left += w; continue; }
        const shown = Math.min(w, limit - left);
        svg.append(el("rect", { x: x0 + left * scale, y, width: shown * scale, height: rowHeight - 6,
          fill: TAB20[Math.min(bars.colours[line], TAB20.length - 1)] }));
        left += w;
      }
      if (left > limit) {  // a cut bar: its total, on a white label so it reads over any colour
        const label = `${Math.round(left).toLocaleString("en-US")} GiB \u2192`;
        svg.append(el("rect", { x: x0 + panelWidth - 7 * label.length - 4, y: y + 2, width: 7 * label.length + 4,
          height: rowHeight - 10, fill: "white", opacity: 0.85 }));
        svg.append(el("text", { x: x0 + panelWidth - 2, y: y + 12, "text-anchor": "end", "font-size": 10,
          fill: "black", "class": "planner-cut" }, label));
      }
    });
    const bx = x0 + bars.budget_gib * scale, bottom = top + rowHeight * bars.steps.length;
    svg.append(el("line", { x1: bx, x2: bx, y1: top - 6, y2: bottom, stroke: "currentColor",
      "stroke-dasharray": "5,3" }));
    svg.append(el("line", { x1: x0, x2: x0 + panelWidth, y1: bottom, y2: bottom, stroke: "#888" }));
    const title = kind === "full" ? "GiB per GPU, full scale"
      : bars.panels.length > 1 ? "GiB per GPU, zoomed to 2.5 x the budget" : "GiB per GPU";
    svg.append(el("text", { x: x0, y: 13, "font-size": 11 }, title));
    svg.append(el("text", { x: x0, y: 27, "font-size": 11 },
      `(dashed: usable budget ${bars.budget_gib.toFixed(1)} GiB)`));
  });
  bars.lines.forEach((line, i) => {
    const x = 10 + (i % 3) * (width / 3), y = top + 24 + rowHeight * bars.steps.length + 16 * Math.floor(i / 3);
    svg.append(el("rect", { x, y: y - 9, width: 10, height: 10,
      fill: TAB20[Math.min(bars.colours[line], TAB20.length - 1)] }));
    svg.append(el("text", { x: x + 14, y, "font-size": 10 }, line));
  });
  return svg;
}

const OUTPUTS = ["planner-verdict", "planner-model", "planner-lines", "planner-chart", "planner-steps", "planner-costs"];

function show(report) {
  document.getElementById("planner-verdict").textContent = report.title;
  document.getElementById("planner-model").textContent = report.model;
  const steps = report.bars.steps.map(([label, parts]) => {
    const total = Object.values(parts).reduce((a, b) => a + b, 0);
    return `${label}: ${total.toLocaleString("en-US", { maximumFractionDigits: 1 })} GiB`
      + (total <= report.bars.budget_gib ? " (fits)" : "");
  });
  document.getElementById("planner-steps").textContent =
    `The bars, top to bottom (usable budget ${report.bars.budget_gib.toFixed(1)} GiB): ${steps.join("; ")}.`;
  document.getElementById("planner-lines").textContent = report.lines.join("\n");
  document.getElementById("planner-chart").replaceChildren(chart(report.bars));
  const table = document.getElementById("planner-costs");
  const head = document.createElement("tr");
  for (const h of report.costs.headers) head.append(Object.assign(document.createElement("th"), { textContent: h }));
  const rows = report.costs.rows.map((row) => {
    const tr = document.createElement("tr");
    for (const cell of row) tr.append(Object.assign(document.createElement("td"), { textContent: cell }));
    return tr;
  });
  table.replaceChildren(head, ...rows);
}

function update() {
  const f = form.elements, config = f.config.value.trim() !== "";
  f.model.disabled = config;  // a pasted config replaces the model chosen
  const fixed = !config && fixedSeqLen[f.model.value];
  f.seq_len.disabled = Boolean(fixed);  // a GPT stand-in's sequence length is part of its shape
  try {
    show(JSON.parse(planReport(JSON.stringify(inputs()))));
    status.textContent = "";
    for (const id of OUTPUTS) document.getElementById(id).hidden = false;
  } catch (error) {  // a Python exception: its last line says what is wrong with the input
    const lines = String(error.message || error).trim().split("\n");
    status.textContent = "Not planned: " + lines[lines.length - 1].replace(/^\w*(Error|Exception): /, "");
    for (const id of OUTPUTS) document.getElementById(id).hidden = true;  // no stale plan beside the error
  }
  app.dataset.rendered = String(Number(app.dataset.rendered) + 1);
}

async function main() {
  const here = new URL(".", import.meta.url);
  const pyodide = await loadPyodide({ indexURL: new URL("../pyodide/", here).href });
  const files = await (await fetch(new URL("ledger.json", here))).json();
  for (const [path, text] of Object.entries(files)) {
    pyodide.FS.mkdirTree("/course/" + path.split("/").slice(0, -1).join("/"));
    pyodide.FS.writeFile("/course/" + path, text);
  }
  planReport = pyodide.runPython(`
import json, sys
sys.path.insert(0, "/course")
from utils.ledger.report import plan_report
lambda kw: json.dumps(plan_report(**json.loads(kw)))
`);
  const options = JSON.parse(pyodide.runPython(
    "import json\nfrom utils.ledger.report import page_options\njson.dumps(page_options())"));
  const f = form.elements, first = options.first;
  fixedSeqLen = options.fixed_seq_len;
  fill(f.model, options.models, first.model);
  fill(f.gpu, options.gpus, first.gpu);
  for (const [name, values] of Object.entries(CHOICES)) fill(f[name], values, first[name]);
  for (const name of ["allow_offload", "allow_lora", "chunked_loss"]) f[name].checked = first[name];
  form.hidden = false;
  form.addEventListener("change", update);
  let typing = null;  // a pasted or typed config is planned as it changes, not only when the box loses focus
  f.config.addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(update, 300); });
  update();
}

main().catch((error) => { status.textContent = `The planner could not start: ${error}`; });

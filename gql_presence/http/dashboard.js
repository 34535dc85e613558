"use strict";
// The dashboard's charts of who and when, drawn as SVG by the page from the service's answers.
// Each chart is as wide in its coordinates as on the screen, so its text keeps its size on a
// phone; every bar and cell says its value in a <title>, which browsers show on hover.
const SVG_NS = "http://www.w3.org/2000/svg";
const DAY_MS = 86_400_000;
const PERIOD = "start newUsers returningUsers resurrectedUsers dormantUsers peakOnline peakAt";
const CHARTS = `query Charts($days: DateTime!, $hours: DateTime!, $now: DateTime!, $cohorts: Date!, $week: DateTime!) {
  days: activity(from: $days, to: $now, granularity: DAY) { ${PERIOD} }
  hours: activity(from: $hours, to: $now, granularity: HOUR) { ${PERIOD} }
  retention(from: $cohorts, cohorts: 6, periods: 5, granularity: WEEK) { start size retained }
  stickiness(days: 28) { days activeUsers ratio activeDays }
  onlinePeriods(from: $week, to: $now) { count p50 p90 p99 buckets { upToSeconds count } }
}`;
const LIFECYCLE = [
  ["newUsers", "new", "#3b82f6"],
  ["returningUsers", "returning", "#1f7a4d"],
  ["resurrectedUsers", "resurrected", "#f79009"],
];
const DORMANT = ["dormantUsers", "dormant", "#d0d5dd"];

function node(name, attributes, text) {
  const made = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) made.setAttribute(key, value);
  if (text !== undefined) made.textContent = text;
  return made;
}

function titled(shape, text) {
  shape.append(node("title", {}, text));
  return shape;
}

// An emptied chart, its coordinates one unit a pixel of its width on the screen.
function canvas(id, height) {
  const svg = document.getElementById(id);
  const width = Math.max(260, Math.round(svg.getBoundingClientRect().width));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  return { svg, width };
}

// Columns of stacked parts above a base line, and one part below it; a label under every
// column that has room for one.
function bars(id, columns, height = 180) {
  const { svg, width } = canvas(id, height);
  const left = 40, right = 4, top = 10, bottom = 20;
  const total = (column) => column.up.reduce((sum, part) => sum + part.value, 0);
  const up = Math.max(1, ...columns.map(total));
  const down = Math.max(0, ...columns.map((column) => (column.down ? column.down.value : 0)));
  const scale = (height - top - bottom) / (up + down);
  const base = top + up * scale;
  const step = (width - left - right) / Math.max(1, columns.length);
  const every = Math.ceil(44 / step);
  svg.append(node("line", { x1: left, x2: width - right, y1: base, y2: base, stroke: "#98a2b3" }));
  svg.append(node("text", { x: left - 4, y: top + 4, "text-anchor": "end" }, up.toLocaleString()));
  if (down) {
    svg.append(node("text", { x: left - 4, y: height - bottom, "text-anchor": "end" }, "−" + down.toLocaleString()));
  }
  columns.forEach((column, i) => {
    const x = left + i * step + step * 0.1;
    const w = Math.max(1, step * 0.8);
    let y = base;
    for (const part of column.up) {
      if (!part.value) continue;
      y -= part.value * scale;
      const shape = node("rect", { x, y, width: w, height: part.value * scale, fill: part.color });
      svg.append(titled(shape, `${column.title}: ${part.value.toLocaleString()} ${part.name}`));
    }
    if (column.down && column.down.value) {
      const part = column.down;
      const shape = node("rect", { x, y: base, width: w, height: part.value * scale, fill: part.color });
      svg.append(titled(shape, `${column.title}: ${part.value.toLocaleString()} ${part.name}`));
    }
    if (i % every === 0) {
      svg.append(node("text", { x: x + w / 2, y: height - 5, "text-anchor": "middle" }, column.label));
    }
  });
}

function lifecycle(id, periods, label) {
  bars(id, periods.map((period) => ({
    title: period.start.slice(0, 16).replace("T00:00", "").replace("T", " "),
    label: label(period.start),
    up: LIFECYCLE.map(([key, name, color]) => ({ value: period[key], name, color })),
    down: { value: period[DORMANT[0]], name: DORMANT[1], color: DORMANT[2] },
  })));
}

// Retention as a heat map: a row per weekly cohort, a column per week after its first, each
// cell the share of the cohort active that week, darker for more.
function heatMap(id, cohorts) {
  const weeks = Math.max(1, ...cohorts.map((cohort) => cohort.retained.length));
  const cell = 24, top = 18, left = 92;
  const { svg, width } = canvas(id, top + cohorts.length * cell);
  const column = (width - left) / weeks;
  for (let k = 0; k < weeks; k++) {
    svg.append(node("text", { x: left + (k + 0.5) * column, y: 12, "text-anchor": "middle" }, k === 0 ? "week 0" : String(k)));
  }
  cohorts.forEach((cohort, row) => {
    const y = top + row * cell;
    const day = cohort.start.slice(0, 10);
    svg.append(node("text", { x: 0, y: y + 16 }, `${day.slice(5)} · ${cohort.size.toLocaleString()}`));
    cohort.retained.forEach((count, k) => {
      const share = cohort.size ? count / cohort.size : 0;
      const percent = Math.round(share * 100);
      const shape = node("rect", {
        x: left + k * column + 1, y: y + 1, width: column - 2, height: cell - 2, rx: 3,
        fill: `rgba(31, 122, 77, ${0.08 + 0.92 * share})`,
      });
      const ago = k === 0 ? "first week" : k === 1 ? "1 week later" : `${k} weeks later`;
      svg.append(titled(shape, `Week of ${day}, ${ago}: ${count.toLocaleString()} of ${cohort.size.toLocaleString()} (${percent}%)`));
      const ink = share > 0.5 ? "#fff" : "#1d2330";
      svg.append(node("text", { x: left + (k + 0.5) * column, y: y + 16, "text-anchor": "middle", style: `fill: ${ink}` }, cohort.size ? percent + "%" : "–"));
    });
  });
}

function duration(seconds) {
  if (seconds < 10) return +seconds.toFixed(1) + " s";
  if (seconds < 60) return Math.round(seconds) + " s";
  if (seconds < 3600) return Math.round(seconds / 60) + " min";
  if (seconds < DAY_MS / 1000) return +(seconds / 3600).toFixed(1) + " h";
  return +(seconds / 86400).toFixed(1) + " d";
}

function figure(id, text) {
  document.getElementById(id).textContent = text;
}

let charted = null;

function draw() {
  if (!charted) return;
  const { days, hours, retention, stickiness, onlinePeriods } = charted;
  lifecycle("days-chart", days, (start) => start.slice(5, 10));
  lifecycle("hours-chart", hours, (start) => start.slice(11, 13) + "h");
  heatMap("retention-chart", retention);
  bars("stickiness-chart", stickiness.activeDays.map((users, i) => ({
    title: `Active on ${i + 1} of ${stickiness.days} days`,
    label: String(i + 1),
    up: [{ value: users, name: "users", color: "#3b82f6" }],
  })), 150);
  figure("dau-mau", stickiness.ratio.toFixed(2));
  figure("sticky-users", stickiness.activeUsers.toLocaleString());
  bars("periods-chart", onlinePeriods.buckets.map((bucket, i, all) => {
    const label = bucket.upToSeconds === null ? "more" : "≤ " + duration(bucket.upToSeconds);
    const from = i === 0 ? "" : duration(all[i - 1].upToSeconds) + " to ";
    return {
      title: bucket.upToSeconds === null ? `Over ${duration(all[i - 1]?.upToSeconds ?? 0)}` : `${from}${duration(bucket.upToSeconds)}`,
      label,
      up: [{ value: bucket.count, name: "periods", color: "#1f7a4d" }],
    };
  }), 150);
  const quantile = (value) => (value === null ? "–" : duration(value));
  figure("p50", quantile(onlinePeriods.p50));
  figure("p90", quantile(onlinePeriods.p90));
  figure("p99", quantile(onlinePeriods.p99));
  figure("periods-count", onlinePeriods.count.toLocaleString());
  bars("peaks-chart", days.map((day) => ({
    title: day.start.slice(0, 10),
    label: day.start.slice(5, 10),
    up: [{ value: day.peakOnline, name: "online at the peak" + (day.peakAt ? ", at " + new Date(day.peakAt).toLocaleTimeString() : ""), color: "#3b82f6" }],
  })), 150);
}

async function refreshCharts() {
  const now = Date.now();
  const at = (ms) => new Date(ms).toISOString();
  charted = await query(CHARTS, {
    days: at(now - 27 * DAY_MS),
    hours: at(now - 47 * 3_600_000),
    now: at(now),
    cohorts: at(now - 35 * DAY_MS).slice(0, 10),
    week: at(now - 7 * DAY_MS),
  });
  draw();
}

refreshCharts().catch(show);
setInterval(() => refreshCharts().catch(show), 60_000);
let resized = null;
window.addEventListener("resize", () => {
  clearTimeout(resized);
  resized = setTimeout(draw, 100);
});

// The dashboard's one script: the charts (Chart.js, vendored beside this file) and, on the served
// page, the open boxes' running figures re-read every few seconds from /api/open.json (the ledger
// alone, as `gpuops ps` reads it). Data comes from the page's <script type="application/json"
// id="dashboard-data">, written by the server from `gpuops ledger month`'s report.
(function () {
  "use strict";
  var el = document.getElementById("dashboard-data");
  if (!el) { return; }
  var data = JSON.parse(el.textContent);
  var BAR_PX = 20, CHROME_PX = 130;  // a horizontal bar's height; its title, legend and USD axis
  var usd = function (v) {
    if (v === null || v === undefined) { return "-"; }
    var s = Math.abs(v).toLocaleString("en-US", { minimumFractionDigits: 4, maximumFractionDigits: 4 });
    return (v < 0 && s !== "0.0000" ? "-$" : "$") + s;
  };
  var duration = function (v) {
    if (v === null || v === undefined) { return "-"; }
    if (v < 0) { return "overdue " + duration(-v); }
    if (v < 60) { return Math.round(v) + " s"; }
    var m = Math.floor(v / 60);
    return m >= 60 ? Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " min" : m + " min";
  };
  var stacked = function (canvas, labels, real, sim, horizontal, title) {
    if (!canvas || typeof Chart === "undefined") { return; }
    // A bar per row, each named: the box grows with the rows (BAR_PX each) instead of Chart.js
    // skipping every other label.
    if (horizontal) { canvas.parentNode.style.height = (CHROME_PX + BAR_PX * Math.max(labels.length, 1)) + "px"; }
    new Chart(canvas, {
      type: "bar",
      data: { labels: labels, datasets: [
        { label: "real USD", data: real, backgroundColor: "#2e7d32", stack: "spend" },
        { label: "simulated USD (not charged)", data: sim, backgroundColor: "#f0b429", stack: "spend" }
      ] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, indexAxis: horizontal ? "y" : "x",
        interaction: { mode: "index", intersect: false },
        scales: horizontal
          ? { x: { stacked: true, beginAtZero: true, title: { display: true, text: "USD" } }, y: { stacked: true, ticks: { autoSkip: false } } }
          : { x: { stacked: true, title: { display: true, text: title } }, y: { stacked: true, beginAtZero: true, title: { display: true, text: "USD" } } },
        plugins: {
          title: { display: horizontal, text: title },
          tooltip: { callbacks: { label: function (ctx) { return ctx.dataset.label + ": " + usd(horizontal ? ctx.parsed.x : ctx.parsed.y); } } }
        }
      }
    });
  };
  var col = function (rows, k) { return rows.map(function (r) { return r[k]; }); };
  stacked(document.getElementById("daily-chart"), data.days.map(function (d) { return d.date.slice(8); }),
          col(data.days, "cost_usd"), col(data.days, "simulated_usd"), false, data.month + " (" + data.tz_words + ")");
  stacked(document.getElementById("trend-chart"), col(data.trend, "month"), col(data.trend, "cost_usd"),
          col(data.trend, "simulated_usd"), false, "month (" + data.tz_words + ")");
  stacked(document.getElementById("experiment-chart"), col(data.by_experiment, "name"), col(data.by_experiment, "cost_usd"),
          col(data.by_experiment, "simulated_usd"), true, "by experiment");
  stacked(document.getElementById("card-chart"), col(data.by_card, "name"), col(data.by_card, "cost_usd"),
          col(data.by_card, "simulated_usd"), true, "by card");

  if (!data.live_url) { return; }  // the saved file: no server to ask
  var show = function (node, value) {
    node.dataset.value = JSON.stringify(value);
    node.textContent = node.dataset.kind === "duration" ? duration(value) : usd(value);
  };
  var refresh = function () {
    fetch(data.live_url, { cache: "no-store" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (live) {
      if (!live) { return; }
      live.open_boxes.forEach(function (b) {
        var row = document.querySelector('tr[data-session="' + CSS.escape(b.session) + '"]');
        if (!row) { return; }
        row.querySelectorAll("[data-live]").forEach(function (node) { show(node, b[node.dataset.live]); });
      });
      document.querySelectorAll("[data-live-total]").forEach(function (node) {
        var path = node.dataset.liveTotal.split(".");
        show(node, live.billing_now[path[0]][path[1]]);
      });
      var at = document.getElementById("live-at");
      if (at) { at.textContent = "(as of " + live.generated_at + "; refreshed every " + data.poll_seconds + " s)"; }
    }).catch(function () { /* the server stopped: the last figures stay */ });
  };
  setInterval(refresh, data.poll_seconds * 1000);
})();

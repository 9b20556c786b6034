// The dashboard's one script: the charts (Chart.js, vendored beside this file) and, on the served
// page, the open boxes' running figures re-read every few seconds from /api/open.json (the ledger
// alone, as `gpuops ps` reads it). Data comes from the page's <script type="application/json"
// id="dashboard-data">, written by the server from `gpuops ledger month`'s report.
(function () {
  "use strict";
  var el = document.getElementById("dashboard-data");
  if (!el) { return; }
  var data = JSON.parse(el.textContent);
  var col = function (rows, k) { return rows.map(function (r) { return r[k]; }); };
  var BAR_PX = 20, CHROME_PX = 130;  // a horizontal bar's height; its title, legend and USD axis
  // rows: [{name, cost_usd, simulated_usd, cost_text, simulated_text}]; the texts are the server's
  // words for each figure (gpuops' one money rule), shown in the tooltips.
  var stacked = function (canvas, rows, label, horizontal, title) {
    var labels = rows.map(label), real = col(rows, "cost_usd"), sim = col(rows, "simulated_usd");
    var texts = [col(rows, "cost_text"), col(rows, "simulated_text")];
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
          tooltip: { callbacks: { label: function (ctx) { return ctx.dataset.label + ": " + texts[ctx.datasetIndex][ctx.dataIndex]; } } }
        }
      }
    });
  };
  var name = function (r) { return r.name; };
  stacked(document.getElementById("daily-chart"), data.days, function (d) { return d.name.slice(8); }, false,
          data.month + " (" + data.tz_words + ")");
  stacked(document.getElementById("trend-chart"), data.trend, name, false, "month (" + data.tz_words + ")");
  stacked(document.getElementById("experiment-chart"), data.by_experiment, name, true, "by experiment");
  stacked(document.getElementById("card-chart"), data.by_card, name, true, "by card");

  if (!data.live_url) { return; }  // the saved file: no server to ask
  // The words come with the figures (the server formats money by gpuops' one rule).
  var show = function (node, value, text) {
    node.dataset.value = JSON.stringify(value);
    node.textContent = text;
  };
  var refresh = function () {
    fetch(data.live_url, { cache: "no-store" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (live) {
      if (!live) { return; }
      live.open_boxes.forEach(function (b) {
        var row = document.querySelector('tr[data-session="' + CSS.escape(b.session) + '"]');
        if (!row) { return; }
        row.querySelectorAll("[data-live]").forEach(function (node) { show(node, b[node.dataset.live], b.text[node.dataset.live]); });
      });
      document.querySelectorAll("[data-live-total]").forEach(function (node) {
        var path = node.dataset.liveTotal.split(".");
        show(node, live.billing_now[path[0]][path[1]], live.billing_now.text[node.dataset.liveTotal]);
      });
      var at = document.getElementById("live-at");
      if (at) { at.textContent = "(as of " + live.generated_at + "; refreshed every " + data.poll_seconds + " s)"; }
    }).catch(function () { /* the server stopped: the last figures stay */ });
  };
  setInterval(refresh, data.poll_seconds * 1000);
})();

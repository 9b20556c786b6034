// The dashboard's one script: the daily spend chart (Chart.js, vendored beside this file).
// Data comes from the page's <script type="application/json" id="dashboard-data">, written by
// the server from `gpuops ledger month`'s report; nothing is fetched.
(function () {
  "use strict";
  var el = document.getElementById("dashboard-data");
  var canvas = document.getElementById("daily-chart");
  if (!el || !canvas || typeof Chart === "undefined") { return; }
  var data = JSON.parse(el.textContent);
  var labels = data.days.map(function (d) { return d.date.slice(8); });
  var usd = function (v) { return "$" + v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 4 }); };
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: labels,
      datasets: [
        { label: "real USD", data: data.days.map(function (d) { return d.cost_usd; }), backgroundColor: "#2e7d32", stack: "spend" },
        { label: "simulated USD (not charged)", data: data.days.map(function (d) { return d.simulated_usd; }), backgroundColor: "#f0b429", stack: "spend" }
      ]
    },
    options: {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      scales: {
        x: { stacked: true, title: { display: true, text: data.month + " (" + data.tz_words + ")" } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: "USD" } }
      },
      plugins: {
        tooltip: { callbacks: { label: function (ctx) { return ctx.dataset.label + ": " + usd(ctx.parsed.y); } } }
      }
    }
  });
})();

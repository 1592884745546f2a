// The queue page's throughput chart: uPlot over the metrics history that the
// page embeds as JSON (completed on the left axis; failed and retried on their
// own, right axis, so a few failures do not lie flat on zero beside thousands).
(function () {
  function draw() {
    var holder = document.getElementById("throughput");
    var source = document.getElementById("history-data");
    if (!holder || !source || holder.dataset.drawn) return;
    holder.dataset.drawn = "1";
    var h = JSON.parse(source.textContent);
    var opts = {
      width: Math.max(200, holder.clientWidth - 16), height: 220,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      scales: { x: { time: true }, n: {}, f: {} },
      axes: [
        { values: function (u, splits) {  // 24-hour UTC times, like every date on the page
          var days = h.t.length > 1 && h.t[h.t.length - 1] - h.t[0] > 86400;  // the 7-day range
          return splits.map(function (t) {
            var iso = new Date(t * 1e3).toISOString();
            return days ? iso.slice(5, 10) + " " + iso.slice(11, 16) : iso.slice(11, 16);
          });
        } },
        { scale: "n", label: "completed / " + (h.unit || "min") },
        { scale: "f", side: 1, label: "failed, retried / " + (h.unit || "min"), grid: { show: false } },
      ],
      series: [
        {},
        { label: "completed", scale: "n", stroke: "#16794c", fill: "rgba(22,121,76,0.08)" },
        { label: "failed", scale: "f", stroke: "#b42318" },
        { label: "retried", scale: "f", stroke: "#a15c00", dash: [4, 4] },
      ],
    };
    new uPlot(opts, [h.t, h.completed, h.failed, h.retried], holder);
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();

// The conversation page's chart: tokens the upstream saw per request (the
// sawtooth), the known window, and one mark per compaction. Data comes from
// the page itself (#chart-data), so the chart needs nothing but uPlot. The
// y axis runs from 0 to data.y_max, a round number above the largest
// request sent (src/web/view.rs); the window is drawn only when the server
// found it within that scale (data.window_shown), and named beside the
// chart otherwise.
(function () {
  "use strict";
  var holder = document.getElementById("chart");
  var source = document.getElementById("chart-data");
  if (!holder || !source || typeof uPlot === "undefined") return;
  var data = JSON.parse(source.textContent);
  if (data.x.length === 0) {
    holder.textContent = "No request recorded yet.";
    return;
  }

  // Draws every compaction as a dashed vertical line with its label, and
  // keeps a DOM element per mark so the marks can be read and tested.
  function compactionMarks(marks) {
    return {
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx;
          var top = u.bbox.top, height = u.bbox.height;
          u.over.querySelectorAll(".cmark").forEach(function (el) { el.remove(); });
          marks.forEach(function (mark, index) {
            var left = u.valToPos(mark.x, "x", true);
            ctx.save();
            ctx.strokeStyle = "#c0392b";
            ctx.lineWidth = 2 * devicePixelRatio;
            ctx.setLineDash([6 * devicePixelRatio, 4 * devicePixelRatio]);
            ctx.beginPath();
            ctx.moveTo(left, top);
            ctx.lineTo(left, top + height);
            ctx.stroke();
            ctx.restore();
            var el = document.createElement("div");
            el.className = "cmark";
            el.title = mark.label;
            el.textContent = "#" + (index + 1) + " " + mark.covered + " msgs";
            el.style.left = u.valToPos(mark.x, "x") + "px";
            u.over.appendChild(el);
          });
        }],
      },
    };
  }

  var width = Math.max(holder.clientWidth, 400);
  var first = data.x[0], last = data.x[data.x.length - 1];
  var series = [
    { label: "request", value: function (u, v, s, idx) { return idx == null ? "--" : "#" + v + " at " + data.at[idx]; } },
    { label: "sent (estimated)", stroke: "#2c7be5", width: 2, points: { show: true } },
    { label: "sent (upstream usage)", stroke: "#00a86b", width: 2, points: { show: true } },
  ];
  var columns = [data.x, data.estimated, data.reported];
  if (data.window_shown) {
    series.push({ label: "known window", stroke: "#888", dash: [4, 4], width: 1, points: { show: false } });
    columns.push(data.window);
  }
  var options = {
    width: width,
    height: 320,
    plugins: [compactionMarks(data.marks)],
    // The y axis as drawn, for reading and testing.
    hooks: { draw: [function (u) { holder.dataset.yMax = String(u.scales.y.max); }] },
    scales: {
      x: { time: false, range: [first - 0.5, last + 0.5] },
      y: { range: [0, data.y_max] },
    },
    axes: [{ label: "request" }, { label: "tokens", size: 70 }],
    series: series,
  };
  var plot = new uPlot(options, columns, holder);
  holder.dataset.marks = String(data.marks.length);
  holder.dataset.points = String(data.x.length);
  holder.dataset.windowShown = String(data.window_shown);
  window.addEventListener("resize", function () {
    plot.setSize({ width: Math.max(holder.clientWidth, 400), height: 320 });
  });
})();

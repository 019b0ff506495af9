// The leaderboard page's script: click a header to sort its table; #sort=N opens it with every table sorted by
// column N.
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.style.cursor = 'pointer';
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var asc = th.dataset.order !== 'asc';
      var key = function (r) { var t = r.cells[col].innerText.trim(); var x = parseFloat(t.replace('∞', 'Infinity'));
                               return isNaN(x) ? t : x; };
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
        return asc ? c : -c; });
      rows.forEach(function (r) { body.appendChild(r); });
      table.querySelectorAll('th').forEach(function (h) { delete h.dataset.order; });
      th.dataset.order = asc ? 'asc' : 'desc';
    });
  });
});
var m = location.hash.match(/sort=(\d+)/);  // a link (or a test) can open the page with every table sorted by a column
if (m) { document.querySelectorAll('table.sortable').forEach(function (table) {
  var th = table.querySelector('th:nth-child(' + (parseInt(m[1]) + 1) + ')'); if (th) { th.click(); } }); }

-- wrk script for bench/http: GET or POST, counts every response whose status is not the expected one,
-- optionally stops each thread after a quota of responses, and prints one machine-readable line.
--
--   wrk ... -s bench/wrk.lua URL -- get  200          GET, expect 200
--   wrk ... -s bench/wrk.lua URL -- post 204          POST "buy milk" (form-urlencoded), expect 204
--   wrk ... -s bench/wrk.lua URL -- post 204 50000    ... and each thread stops after 50000 responses
--
-- The last line wrk prints is:
--   BENCH requests=N duration_us=N rps=F p50_us=N p99_us=N max_us=N unexpected=N connect=N read=N write=N timeout=N
--         status=N unexpected_statuses=CODE:COUNT,... (or -)
-- unexpected = responses whose status was not the expected one (counted here, per response), and by
-- status code in unexpected_statuses;
-- connect/read/write/timeout = wrk's socket errors; status = wrk's own count of statuses >= 400.

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   mode = args[1] or "get"
   expected = tonumber(args[2] or "200")
   quota = tonumber(args[3] or "0")
   responses = 0
   unexpected = 0
   statuses = {}
   if mode == "post" then
      wrk.method = "POST"
      wrk.body = "buy milk"
      wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
   end
end

function response(status, headers, body)
   responses = responses + 1
   if status ~= expected then
      unexpected = unexpected + 1
      statuses[status] = (statuses[status] or 0) + 1
   end
   if quota > 0 and responses >= quota then
      wrk.thread:stop()
   end
end

function done(summary, latency, requests)
   local unexpected_total = 0
   local by_status = {}
   for _, thread in ipairs(threads) do
      unexpected_total = unexpected_total + (thread:get("unexpected") or 0)
      for status, count in pairs(thread:get("statuses") or {}) do
         by_status[status] = (by_status[status] or 0) + count
      end
   end
   local codes = {}
   for status, count in pairs(by_status) do
      table.insert(codes, status .. ":" .. count)
   end
   table.sort(codes)
   local seconds = summary.duration / 1e6
   local errors = summary.errors
   io.write(string.format(
      "BENCH requests=%d duration_us=%d rps=%.1f p50_us=%d p99_us=%d max_us=%d unexpected=%d " ..
      "connect=%d read=%d write=%d timeout=%d status=%d unexpected_statuses=%s\n",
      summary.requests, summary.duration, seconds > 0 and summary.requests / seconds or 0,
      latency:percentile(50), latency:percentile(99), latency.max, unexpected_total,
      errors.connect, errors.read, errors.write, errors.timeout, errors.status,
      #codes > 0 and table.concat(codes, ",") or "-"))
end

-- May a request to this host start now? The last gate before the download.
--
-- Claims are spaced by the host's delay, but a claimed URL can wait in a
-- worker (a busy reactor, a middleware) before it is sent, and two workers'
-- waits differ. This gate spaces the actual starts, for all workers, by the
-- smallest gap the delay allows: delay x (1 - jitter), and never less than
-- the host's floor fl (a robots.txt Crawl-delay, which jitter must not cut).
-- A backoff hold bk (Retry-After, a 429 / 503, a breaker cooling down) set
-- after the URL was claimed keeps it from starting too. (Not w: that also
-- holds a host while its robots.txt or a breaker probe is in flight, which
-- must not stop the probe itself.)
--
-- A request that passed the gate and then sat in a stalled worker passes it
-- again (its turn is stale). It names the turn its first pass set (ARGV[2]):
-- if no request of the site started since, the site's gate still holds that
-- turn, and the request starts now without waiting out its own reservation;
-- the next gap counts from now.
--
-- KEYS[1]  the site hash (PP:g:NAME: every scheme and port of a name share
--          it); ARGV[1] jitter (0..1), ARGV[2] the turn of an earlier pass or ''
-- Returns {0, turn} (start now; the gate is moved on to turn) or {ms to wait, 0}.
local now = now_ms()
local st = redis.call('HMGET', KEYS[1], 's', 'dl', 'fl', 'bk')
local gate, delay = tonumber(st[1] or '0') or 0, tonumber(st[2] or '0') or 0
local hold = tonumber(st[4] or '0') or 0
local mine = ARGV[2] ~= nil and ARGV[2] ~= '' and gate == tonumber(ARGV[2])
if now < hold or (now < gate and not mine) then
  return {math.max(gate, hold) - now, 0}
end
local gap = math.max(tonumber(st[3] or '0') or 0, math.floor(delay * (1 - tonumber(ARGV[1]))))
redis.call('HSET', KEYS[1], 's', now + gap)
return {0, now + gap}

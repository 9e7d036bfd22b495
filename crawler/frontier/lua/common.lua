-- Helpers shared by the frontier's scripts (Redis scripts cannot import one
-- another): luabuild.py puts in front of each script the ones it names, and
-- the ones those name, with the records' fields (S.in_flight: schema.py)
-- resolved to stored names; its part common_gates.lua is put in at its end.
-- Hold to one form at the top level: a comment, then `local function NAME`
-- or `local NAME[, NAME] = ...` (luabuild.py cuts the file there).

-- A stored number, or d when the field is missing or not a finite number.
-- Anyone who can write to the shared Redis can plant a field, and a script
-- that fails on one would fail every claim of its partition: a bad field
-- reads as its default instead.
local function num(v, d)
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return d end
  return n
end

-- HINCRBY that a planted non-integer field does not break: the field
-- starts again from the increment.
local function hincr(key, field, by)
  local r = redis.pcall('HINCRBY', key, field, by)
  if type(r) == 'table' and r.err then
    redis.call('HSET', key, field, by)
    return tonumber(by)
  end
  return r
end

-- The server's clock in ms: every worker sees the same time. Read once a
-- script: nothing else runs while it does, and it takes a millisecond or so.
local script_now = nil
local function now_ms()
  if not script_now then
    local t = redis.call('TIME')
    script_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return script_now
end

-- A partition's timed sets (PP:leased, PP:delayed, PP:vdue, PP:dwake,
-- PP:iwake) need a claim's look only once the earliest time in any of them
-- has come: the claim keeps that time in PP:n's "mt" field and looks at the
-- sets only then, so a claim in a partition with nothing due costs three
-- commands, not a dozen; and each set's own earliest time in "mt:SET", so
-- that a claim looks only at the sets whose time came. Every write of an
-- earlier time lowers both (timer_at). A claim that finds a set empty stores
-- the negative of a time a minute away: a sweep that finds a write that went
-- around timer_at, and no time to report as due. No field: look now.
local TIMED_SETS = {'leased', 'delayed', 'vdue', 'dwake', 'iwake'}
local TIMER_FIELDS = {N.timer_leased, N.timer_delayed, N.timer_vdue, N.timer_dwake, N.timer_iwake}

-- Whether a timer field says to look now (a missing field does).
local function timer_due(v, now)
  return now >= math.abs(num(v, 0))
end

-- The soonest time (ms) this script placed a host in the ready set or set
-- a timer at (-1: none): the only things it may have made due sooner than
-- the partition's last claim said, which release.lua and admit.lua return
-- so that their worker claims there no sooner (partitiondue.py).
local soonest_due = -1
local function note_due(at)
  if soonest_due < 0 or at < soonest_due then soonest_due = at end
end

-- soonest_due for the caller, 0 when it has come (now: the script's time,
-- nil: read it): the worker's reckoning of the server's clock lags by a
-- round trip, and "now" must not read as "later" there.
local function due_reply(now)
  if soonest_due < 0 then return -1 end
  if soonest_due <= (now or now_ms()) then return 0 end
  return soonest_due
end

-- Workers that found nothing due in a partition wait for its next time
-- (partitiondue.py) without asking it again: PP:n's "sl" is the latest time
-- any of them waits for (claim.lua raises it). A script that makes something
-- due sooner than that tells them on the crawl's wake channel ("PART AT",
-- scheduling/wakes.py) and lowers "sl": every waiting worker now waits for
-- no later than AT. Nobody waiting ("sl" past): no message.
local SLEEP_FOREVER = 9007199254740991  -- a partition with nothing timed

local function wake_sleepers(p)
  if soonest_due < 0 then return end
  local k = p .. ':n'
  local sl = num(redis.call('HGET', k, N.sleepers), 0)
  if soonest_due >= sl or sl <= now_ms() then return end
  redis.call('HSET', k, N.sleepers, soonest_due)
  local ns, part = string.match(p, '^{(.*)/p(%d+)}$')
  if ns then redis.call('PUBLISH', ns .. ':wake', part .. ' ' .. soonest_due) end
end

-- Whether timer_at wrote a partition's "mt" in this script (a claim that
-- read it at its start reads it again only then).
local timers_lowered = false

local function timer_at(p, at, set)
  note_due(at)
  local k = p .. ':n'
  local f = N.timers .. ':' .. set
  local st = redis.call('HMGET', k, N.timers, f)
  if not st[1] then return end
  local w = {}
  for j, name in ipairs({N.timers, f}) do
    local t = num(st[j], 0)
    if st[j] and not (t > 0 and t <= at) then
      w[#w + 1] = name
      w[#w + 1] = at
    end
  end
  if #w > 0 then
    redis.call('HSET', k, unpack(w))
    timers_lowered = true
  end
end

-- Politeness belongs to the server a name points at, not to one scheme or
-- port of it: a host key "scheme://name:port" (an authority: queue, robots)
-- shares one site record PP:g:NAME (concurrency, delays, holds, breaker,
-- budget, DNS) with every other authority of the same name, and PP:ga:NAME
-- lists those authorities. The partition is chosen by the name (keys.py), so
-- they all live here.
local function site_of(host)
  return string.match(host, '^[^:]*://(.*):%d+$') or host
end

local function site_key(p, host)
  return p .. ':g:' .. site_of(host)
end

-- Live control (scrapy frontier host): an operator's override of a site or
-- domain record's limits, for every worker until reset. xc concurrency, xd
-- delay ms, xp paused. A robots Crawl-delay (fl) and holds stay in force: an
-- override never sends faster than the site's robots.txt allows.

-- Adaptive pacing (release.lua): ad is the delay the site's last answer
-- asked for, FRONTIER_ADAPTIVE_FACTOR x how long it took (capped); a server
-- that slows down is asked less often.

-- A site's concurrency in force (g: its record, as read): the override,
-- else c (settings, robots.txt, a 429's one at a time); one at a time
-- whatever the override under a Crawl-delay, while adaptation has
-- lengthened the delay (ad above dl: a slow server gets no stacked
-- requests), and, with adaptive pacing on, until the site's first answer
-- (fa, written when the site is new: how slowly it answers is not known
-- before; release.lua's adapt removes it).
local function site_concurrency(g)
  local n = num(g[S.ctl_concurrency] or g[S.concurrency], 1)
  if num(g[S.floor], 0) > 0 or num(g[S.adaptive], 0) > num(g[S.delay], 0)
      or g[S.first_answer] then
    n = math.min(n, 1)
  end
  return n
end

-- A site's or domain's delay between claims and between starts (ms): the
-- override, else dl. (The adaptive delay counts from the end of an answer:
-- release.lua applies it.)
local function delay_in_force(dl, xd)
  return num(xd or dl, 0)
end

-- Budgets (BUDGET_*, off at 0): what a site (every scheme and port of a
-- name) and its registered domain may spend. A record counts bp, the URLs
-- handed out (claim.lua; one given back unstarted, or refused before its
-- download, is taken off again: release.lua), so a page budget is never
-- overrun, however many workers claim; bb, the bytes its answers brought
-- (release.lua); b0, when its first URL was claimed (ms). A domain record
-- counts them only while a domain budget is on. An operator's override of a site's budget
-- (control.lua: qp pages, qb bytes, qs ms) replaces the setting.
-- Returns the budget spent ("pages", "bytes" or "seconds") and its limit, or
-- nil, nil and how many more URLs one lease_head may hand out (math.huge: no
-- limit). Under a byte or time budget that is one (no URLs reserved ahead):
-- what a URL will cost is known only once it is fetched, and a
-- reservation's URLs are fetched whatever the budget says by then; such a
-- budget is overrun by what is in flight when it is spent, the site's
-- concurrency at most.
local function budget_left(rec, pages, bytes, ms, now)
  local left = math.huge
  if pages > 0 then
    left = pages - num(rec[S.pages], 0)
    if left <= 0 then return 'pages', pages, 0 end
  end
  if bytes > 0 then
    if num(rec[S.bytes], 0) >= bytes then return 'bytes', bytes, 0 end
    left = 1
  end
  if ms > 0 then
    local first = rec[S.first_claim]
    if first and now - num(first, now) >= ms then return 'seconds', ms, 0 end
    left = 1
  end
  return nil, nil, left
end

-- Some fields of a hash, by name, in one HMGET (a missing field: false).
local function record(key, names)
  local vals = redis.call('HMGET', key, unpack(names))
  local r = {}
  for j, name in ipairs(names) do r[name] = vals[j] end
  return r
end

-- A host belongs in its partition's ready set, scored by its next-allowed
-- time, exactly while it has queued URLs and its site has room for one more
-- in flight. The next-allowed time is the latest of the site's t (pacing),
-- s (its next start: a claim is a start, see claim.lua), w (a hold:
-- backoff, a breaker), rj (a robots.txt of one of its hosts being fetched)
-- dj (its name being resolved: the IP scope's DNS job) and bj (its spent
-- budget being ended: a budget job), and the host's own rw (its robots.txt
-- being fetched, or unreachable). READY_SITE: the site fields that rule reads.
local READY_SITE = {S.in_flight, S.concurrency, S.next_claim, S.held, S.robots_job,
                    S.ctl_concurrency, S.ctl_paused, S.floor, S.delay, S.adaptive,
                    S.first_answer, S.dns_job, S.next_start, S.budget_job}

-- When a host is ready (nil: it is not) by that rule, from its queue length
-- n, its own robots wait rw and its site's fields g (by name, as they stand).
local function ready_at(n, rw, g)
  if num(n, 0) > 0 and not g[S.ctl_paused]
      and num(g[S.in_flight], 0) < site_concurrency(g) then
    return math.max(num(g[S.next_claim], 0), num(g[S.held], 0), num(g[S.robots_job], 0),
                    num(rw, 0), num(g[S.dns_job], 0), num(g[S.next_start], 0),
                    num(g[S.budget_job], 0))
  end
  return nil
end

-- Hosts placed in the ready set by this script (their score) or taken out
-- of it (false): a claim reads the set's head in batches, and skips what
-- moved since (claim.lua).
local ready_moved = {}

local function place_host(p, host, at)
  ready_moved[host] = at or false
  if at then
    note_due(at)
    redis.call('ZADD', p .. ':ready', at, host)
  else
    redis.call('ZREM', p .. ':ready', host)
  end
end

local function refresh_host(p, host)
  local st = redis.call('HMGET', p .. ':h:' .. host, H.queued, H.robots_wait)
  place_host(p, host, ready_at(st[1], st[2], record(site_key(p, host), READY_SITE)))
end

-- Every authority of host's site, after the site's gates changed.
local function refresh_site(p, host)
  local site = site_of(host)
  local hosts = redis.call('SMEMBERS', p .. ':ga:' .. site)
  if #hosts == 0 then hosts = {host} end
  for _, h in ipairs(hosts) do refresh_host(p, h) end
end

-- A site's fields as read (g), with those written since (w) over them.
local function as_written(g, w)
  local out = {}
  for k, v in pairs(g) do out[k] = v end
  for k, v in pairs(w) do out[k] = v end
  return out
end

-- A registered domain is gated only once it has more than one site: the
-- first site its record counts (ns, fs) is alone in it (d1) and skips the
-- domain's gate at its claims and releases, which could only repeat its
-- own. The second site ends that: the first site's turns become the
-- domain's (its reservation under way holds the second off until it ends,
-- re), and every site of the domain is gated from then on. An operator's
-- override of the domain ends it too (control.lua). (A domain an older
-- build gated has turns, t, and no count: never alone.)
local function join_domain(p, sk, site, domain)
  local dk = p .. ':d:' .. domain
  local st = redis.call('HMGET', dk, D.sites, D.first_site, D.next_claim, D.next_start,
                        D.reserved_until, D.last_site)
  if not st[1] and not st[3] then
    redis.call('HSET', dk, D.sites, 1, D.first_site, site)
    redis.call('HSET', sk, S.alone, 1)
    return
  end
  redis.call('HSET', dk, D.sites, num(st[1], 1) + 1)
  if not st[2] or num(st[1], 0) ~= 1 then return end
  local fk = p .. ':g:' .. st[2]
  local f = redis.call('HMGET', fk, S.next_claim, S.next_start, S.alone, S.in_flight)
  if not f[3] then return end
  redis.call('HDEL', fk, S.alone)
  local t = math.max(num(f[1], 0), num(f[2], 0))
  if num(f[4], 0) > 0 or t > now_ms() then  -- it claimed lately (only ever later)
    redis.call('HSET', dk, D.next_claim, math.max(t, num(st[3], 0)),
               D.next_start, math.max(t, num(st[4], 0)),
               D.reserved_until, math.max(t, num(st[5], 0)), D.last_site, st[6] or st[2])
  end
end

-- Whether a site's claims and releases skip its domain's gate: it is alone
-- in its domain (d1) and its own limits are no looser than the domain's
-- (dconc, ddelay: the settings), so that gate could only repeat them.
local function alone_in_domain(g, dconc, ddelay)
  if not g[S.alone] or delay_in_force(g[S.delay], g[S.ctl_delay]) < ddelay then return false end
  return dconc == 0 or site_concurrency(g) <= dconc
end

-- The site record of a new host (n URLs queued: 0), with the given limits and
-- its registered domain if the site is new too, and its own budget (budget:
-- "pages:bytes:ms", each "" for none: qp, qb, qs, as an operator's; nil:
-- none). Returns 1 when the host is new.
-- await_first: adaptive pacing is on (admit.lua), so a new site takes one
-- request at a time until its first answer (site_concurrency).
local await_first = false
local function ensure_host(p, host, conc, delay_ms, domain, exists, budget)
  local hk = p .. ':h:' .. host
  if exists == nil then exists = redis.call('EXISTS', hk) == 1 end
  if exists then return 0 end
  redis.call('HSET', hk, H.queued, 0)
  local sk = site_key(p, host)
  local ga = p .. ':ga:' .. site_of(host)
  local added = redis.call('SADD', ga, host)
  if redis.call('EXISTS', sk) == 0 then
    -- New sites are all due at once; their first next-allowed time (a few ms
    -- after the epoch, from a hash of the name) orders them at random, not
    -- by name: a thousand names of one server seeded first do not all come
    -- before the others.
    local first = tonumber(string.sub(redis.sha1hex(site_of(host)), 1, 4), 16) % 1000
    redis.call('HSET', sk, S.in_flight, 0, S.next_claim, first, S.admitted, 0,
               S.concurrency, conc, S.delay, delay_ms, S.hosts, redis.call('SCARD', ga))
    if await_first then redis.call('HSET', sk, S.first_answer, 1) end
    if budget then
      local q = {}
      for value in string.gmatch(budget .. ':', '([^:]*):') do q[#q + 1] = value end
      for j, field in ipairs({S.budget_pages, S.budget_bytes, S.budget_ms}) do
        if q[j] and q[j] ~= '' then redis.call('HSET', sk, field, q[j]) end
      end
    end
    -- (requeue.lua knows no domain: a site without one is gated alone)
    if domain then
      redis.call('HSET', sk, S.domain, domain)
      join_domain(p, sk, site_of(host), domain)
    end
  elseif added == 1 and redis.call('HEXISTS', sk, S.hosts) == 1 then
    hincr(sk, S.hosts, 1)
  end
  return 1
end

-- Queue order: higher priority first, then first come first served; the
-- partition's sequence number breaks ties (a double holds both exactly).
local function queue_score(prio, seq)
  return -tonumber(prio) * 4294967296 + seq % 4294967296
end

-- Put an entry in its host's queue and keep the ready set right.
local function push_url(p, host, score, entry)
  redis.call('ZADD', p .. ':q:' .. host, score, entry)
  hincr(p .. ':h:' .. host, H.queued, 1)
  refresh_host(p, host)
end

-- Field-value pairs to write in one HSET, from a table (none: no call).
local function hset_fields(key, fields)
  local args = {}
  for name, value in pairs(fields) do
    args[#args + 1] = name
    args[#args + 1] = value
  end
  if #args > 0 then redis.call('HSET', key, unpack(args)) end
end

-- Split "f1 \n f2 \n ... \n rest" into n fields; the last one keeps any
-- newlines (an entry starts with a binary fingerprint).
local function split_fields(data, n)
  local out, pos = {}, 1
  for _ = 1, n - 1 do
    local cut = string.find(data, '\n', pos, true)
    out[#out + 1] = string.sub(data, pos, cut - 1)
    pos = cut + 1
  end
  out[#out + 1] = string.sub(data, pos)
  return unpack(out)
end

-- The label of a dead letter's reason (crawler/deadletter.py writes a JSON
-- object whose "reason" it is; an older reason is the label itself).
local function reason_label(reason)
  return string.match(reason, '"reason": *"([^"]*)"') or reason
end

-- Store a dead letter (PP:dead: "host \n reason \n entry" by fingerprint)
-- and count it by its reason's label (N.dead_by, in the counts hash nk), so
-- that the crawl's account (frontier/account.py) has the dead letters by
-- reason without a scan. The caller counts N.dead.
local function dead_letter(nk, p, fp, host, reason, entry)
  redis.call('HSET', p .. ':dead', fp, host .. '\n' .. reason .. '\n' .. entry)
  hincr(nk, N.dead_by .. reason_label(reason), 1)
end

-- A lease is its member of PP:leased, "HOST\nSCORE\nWORKER\nENTRY" (the
-- entry starts with its 16-byte fingerprint): host, score, worker, entry,
-- fingerprint; nil for anything else (an older build's member was the
-- fingerprint alone, its details in PP:ld).
local function lease_fields(member)
  if #member <= 16 then return nil end
  local a = string.find(member, '\n', 1, true)
  local b = a and string.find(member, '\n', a + 1, true)
  local c = b and string.find(member, '\n', b + 1, true)
  if not c or #member - c < 16 then return nil end
  local entry = string.sub(member, c + 1)
  return string.sub(member, 1, a - 1), string.sub(member, a + 1, b - 1),
    string.sub(member, b + 1, c - 1), entry, string.sub(entry, 1, 16)
end

-- Hold a site back until until_ms (server time); a hold only ever grows (the
-- later end wins). Two fields because claims and starts are gated apart: w
-- keeps the site's hosts out of the ready set (no claims, see refresh_host)
-- and bk keeps URLs claimed before the hold from starting (read by start.lua).
local function hold_host(sk, until_ms)
  local st = redis.call('HMGET', sk, S.held, S.backoff)
  if until_ms > num(st[1], 0) then redis.call('HSET', sk, S.held, until_ms) end
  if until_ms > num(st[2], 0) then redis.call('HSET', sk, S.backoff, until_ms) end
end

--#include common_gates

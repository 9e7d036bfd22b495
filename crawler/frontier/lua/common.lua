-- Helpers shared by the frontier's scripts: store.py prepends this file to
-- each script when it loads it (Redis scripts cannot import one another).

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
local TIMER_FIELDS = {'mt:leased', 'mt:delayed', 'mt:vdue', 'mt:dwake', 'mt:iwake'}

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
  local sl = num(redis.call('HGET', k, 'sl'), 0)
  if soonest_due >= sl or sl <= now_ms() then return end
  redis.call('HSET', k, 'sl', soonest_due)
  local ns, part = string.match(p, '^{(.*)/p(%d+)}$')
  if ns then redis.call('PUBLISH', ns .. ':wake', part .. ' ' .. soonest_due) end
end

-- Whether timer_at wrote a partition's "mt" in this script (a claim that
-- read it at its start reads it again only then).
local timers_lowered = false

local function timer_at(p, at, set)
  note_due(at)
  local k = p .. ':n'
  local f = 'mt:' .. set
  local st = redis.call('HMGET', k, 'mt', f)
  if not st[1] then return end
  local w = {}
  for j, name in ipairs({'mt', f}) do
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

-- A site's concurrency in force: the override, else c (settings, robots.txt,
-- a 429's one at a time); one at a time whatever the override under a
-- Crawl-delay, and while adaptation has lengthened the delay (ad above dl: a
-- slow server gets no stacked requests).
local function site_concurrency(c, xc, fl, dl, ad)
  local n = num(xc or c, 1)
  if num(fl, 0) > 0 or num(ad, 0) > num(dl, 0) then
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
    left = pages - num(rec.bp, 0)
    if left <= 0 then return 'pages', pages, 0 end
  end
  if bytes > 0 then
    if num(rec.bb, 0) >= bytes then return 'bytes', bytes, 0 end
    left = 1
  end
  if ms > 0 then
    if rec.b0 and now - num(rec.b0, now) >= ms then return 'seconds', ms, 0 end
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
local READY_SITE = {'i', 'c', 't', 'w', 'rj', 'xc', 'xp', 'fl', 'dl', 'ad', 'dj', 's', 'bj'}

-- When a host is ready (nil: it is not) by that rule, from its queue length
-- n, its own robots wait rw and its site's fields g (by name, as they stand).
local function ready_at(n, rw, g)
  if num(n, 0) > 0 and not g.xp
      and num(g.i, 0) < site_concurrency(g.c, g.xc, g.fl, g.dl, g.ad) then
    return math.max(num(g.t, 0), num(g.w, 0), num(g.rj, 0), num(rw, 0), num(g.dj, 0),
                    num(g.s, 0), num(g.bj, 0))
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
  local st = redis.call('HMGET', p .. ':h:' .. host, 'n', 'rw')
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
  local st = redis.call('HMGET', dk, 'ns', 'fs', 't', 's', 're', 'rh')
  if not st[1] and not st[3] then
    redis.call('HSET', dk, 'ns', 1, 'fs', site)
    redis.call('HSET', sk, 'd1', 1)
    return
  end
  redis.call('HSET', dk, 'ns', num(st[1], 1) + 1)
  if not st[2] or num(st[1], 0) ~= 1 then return end
  local fk = p .. ':g:' .. st[2]
  local f = redis.call('HMGET', fk, 't', 's', 'd1', 'i')
  if not f[3] then return end
  redis.call('HDEL', fk, 'd1')
  local t = math.max(num(f[1], 0), num(f[2], 0))
  if num(f[4], 0) > 0 or t > now_ms() then  -- it claimed lately (only ever later)
    redis.call('HSET', dk, 't', math.max(t, num(st[3], 0)), 's', math.max(t, num(st[4], 0)),
               're', math.max(t, num(st[5], 0)), 'rh', st[6] or st[2])
  end
end

-- Whether a site's claims and releases skip its domain's gate: it is alone
-- in its domain (d1) and its own limits are no looser than the domain's
-- (dconc, ddelay: the settings), so that gate could only repeat them.
local function alone_in_domain(g, dconc, ddelay)
  if not g.d1 or delay_in_force(g.dl, g.xd) < ddelay then return false end
  return dconc == 0 or site_concurrency(g.c, g.xc, g.fl, g.dl, g.ad) <= dconc
end

-- The site record of a new host (n URLs queued: 0), with the given limits and
-- its registered domain if the site is new too, and its own budget (budget:
-- "pages:bytes:ms", each "" for none: qp, qb, qs, as an operator's; nil:
-- none). Returns 1 when the host is new.
local function ensure_host(p, host, conc, delay_ms, domain, exists, budget)
  local hk = p .. ':h:' .. host
  if exists == nil then exists = redis.call('EXISTS', hk) == 1 end
  if exists then return 0 end
  redis.call('HSET', hk, 'n', 0)
  local sk = site_key(p, host)
  local ga = p .. ':ga:' .. site_of(host)
  local added = redis.call('SADD', ga, host)
  if redis.call('EXISTS', sk) == 0 then
    -- New sites are all due at once; their first next-allowed time (a few ms
    -- after the epoch, from a hash of the name) orders them at random, not
    -- by name: a thousand names of one server seeded first do not all come
    -- before the others.
    local first = tonumber(string.sub(redis.sha1hex(site_of(host)), 1, 4), 16) % 1000
    redis.call('HSET', sk, 'i', 0, 't', first, 'a', 0, 'c', conc, 'dl', delay_ms,
               'na', redis.call('SCARD', ga))
    if budget then
      local q = {}
      for value in string.gmatch(budget .. ':', '([^:]*):') do q[#q + 1] = value end
      for j, field in ipairs({'qp', 'qb', 'qs'}) do
        if q[j] and q[j] ~= '' then redis.call('HSET', sk, field, q[j]) end
      end
    end
    -- (requeue.lua knows no domain: a site without one is gated alone)
    if domain then
      redis.call('HSET', sk, 'd', domain)
      join_domain(p, sk, site_of(host), domain)
    end
  elseif added == 1 and redis.call('HEXISTS', sk, 'na') == 1 then
    hincr(sk, 'na', 1)
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
  hincr(p .. ':h:' .. host, 'n', 1)
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
  local st = redis.call('HMGET', sk, 'w', 'bk')
  if until_ms > num(st[1], 0) then redis.call('HSET', sk, 'w', until_ms) end
  if until_ms > num(st[2], 0) then redis.call('HSET', sk, 'bk', until_ms) end
end

-- Domains: every site of one registered domain (www.a.test, img.a.test) is
-- gated together as well as alone. PP:d:DOMAIN holds the domain's next claim
-- (t) and next start (s) times; PP:di:DOMAIN its leases in flight by expiry,
-- so a lease whose worker vanished stops counting by itself; a host that
-- found its domain busy waits in PP:dw:DOMAIN, out of the ready set, and
-- PP:dwake says when to look at the domain again (claim.lua wakes it). The
-- limits are the claim's arguments: settings changed between runs apply.

-- How many leases of the domain are in flight now. Ended leases leave the
-- set when they are released; prune also drops those that ran out (a
-- vanished worker's robots job), which claim.lua does when it wakes the
-- domain.
local function domain_in_flight(p, dom, now, prune)
  local k = p .. ':di:' .. dom
  if prune then redis.call('ZREMRANGEBYSCORE', k, '-inf', now) end
  return redis.call('ZCOUNT', k, '(' .. now, '+inf')
end

-- A domain whose reservation a claim is making (claim.lua domain_reservation):
-- {dom, di, d, wake}, its leases (di), record fields (d) and wake, written
-- once at the reservation's end; the wakes its hosts would ask for one by
-- one are no sooner than that one.
local dom_batch = nil

-- What this script knows of domains' waits, so that a release or claim of
-- several of a domain's hosts looks once: dwake_at[dom], the domain's wake
-- in PP:dwake as read or written here (false: none); dw_filled[dom], true
-- once a host was put in PP:dw:DOM here. A step that changes either some
-- other way says so (forget_domain_wake).
local dwake_at, dw_filled = {}, {}
local function forget_domain_wake(dom)
  dwake_at[dom], dw_filled[dom] = nil, nil
end

-- Look at the domain's waiting hosts again at at_ms (the earliest ask wins).
local function wake_domain(p, dom, at_ms)
  if dom_batch and dom_batch.dom == dom then return end
  if not dw_filled[dom] and redis.call('EXISTS', p .. ':dw:' .. dom) == 0 then return end
  local cur = dwake_at[dom]
  if cur == nil then cur = redis.call('ZSCORE', p .. ':dwake', dom) or false end
  if not cur or at_ms < num(cur, 0) then
    redis.call('ZADD', p .. ':dwake', at_ms, dom)
    timer_at(p, at_ms, 'dwake')
    cur = at_ms
  end
  dwake_at[dom] = cur
end

-- A host waits for its domain: out of the ready set, in the domain's
-- waiting set (scored by when it is ready itself), the domain to be looked
-- at again at wake_at (the earliest ask wins).
-- (from_dw: a host a claim's domain reservation takes from the waiting set,
-- claim.lua; not in the ready set, and false once it waits here again.)
local from_dw = nil
local function queue_for_domain(p, host, dom, score, wake_at)
  if from_dw == host then
    from_dw = false
  else
    ready_moved[host] = false
    redis.call('ZREM', p .. ':ready', host)
  end
  redis.call('ZADD', p .. ':dw:' .. dom, score, host)
  dw_filled[dom] = true
  wake_domain(p, dom, wake_at)
end

-- refresh_site, by a step that holds the site's fields as they stand now (g:
-- read and written, READY_SITE and na among them) and maybe the host's n
-- and rw (nil: read here): a site of one authority (na, the size of
-- PP:ga:NAME; missing on sites an older build made) is placed without
-- reading it again, and no sooner than its domain's next turn (domain_at,
-- when the step knows it: a claim would only find the domain busy before).
-- turns_dom: the domain, when its sites take turns (m, claim.lua): then the
-- host waits for the domain's turn with the others (PP:dw:DOMAIN) instead,
-- where the domain's wake or reservation finds it; in the ready set it
-- would only be found busy by the next claim, and moved there.
local function refresh_site_known(p, host, g, n, rw, domain_at, turns_dom)
  if g.na ~= '1' and g.na ~= 1 then return refresh_site(p, host) end
  if n == nil then
    local st = redis.call('HMGET', p .. ':h:' .. host, 'n', 'rw')
    n, rw = st[1], st[2]
  end
  local at = ready_at(n, rw, g)
  if at and turns_dom then
    queue_for_domain(p, host, turns_dom, at, math.max(at, domain_at or 0))
  else
    place_host(p, host, at and math.max(at, domain_at or 0))
  end
end

-- A lease (member: a fingerprint, or "R" .. host for a robots job) of the
-- site sk's domain ended: a waiting host may take its place. (known: the
-- site's domain field as the caller read it, false when it has none.)
local function domain_lease_ended(p, sk, member, now, known)
  local dom = known
  if dom == nil then dom = redis.call('HGET', sk, 'd') end
  if not dom then return end
  redis.call('ZREM', p .. ':di:' .. dom, member)
  local t = num(redis.call('HGET', p .. ':d:' .. dom, 't'), 0)
  wake_domain(p, dom, math.max(now, t))
end

-- IP scope (ipgate.lua): a host whose server address has no room is parked
-- in PP:iw:ADDR, scored by when to look at it again, out of the ready set:
-- the end of a request on the address wakes it (ipwake.lua) or, should that
-- wake be lost with its worker, its own time does (claim.lua; PP:iwake says
-- when to look at an address's parked hosts). The site keeps the address it
-- was parked for (ip) and until when that is known (ipx, from the DNS
-- answer's TTL), so its other hosts, and the next URL of this one, join the
-- parked hosts instead of being claimed for nothing.
-- (iw_any[addr]: whether PP:iw:ADDR holds hosts, as this script knows it;
-- nil: not known, look.)
local iw_any = {}
local function ip_has_parked(p, addr)
  if iw_any[addr] == nil then
    iw_any[addr] = redis.call('EXISTS', p .. ':iw:' .. addr) == 1
  end
  return iw_any[addr]
end

local function park_for_ip(p, host, addr, at)
  ready_moved[host] = false
  redis.call('ZREM', p .. ':ready', host)
  iw_any[addr] = true
  local parked = p .. ':iw:' .. addr
  if not redis.call('ZSCORE', parked, host) then redis.call('ZADD', parked, at, host) end
  local cur = redis.call('ZSCORE', p .. ':iwake', addr)
  if not cur or at < num(cur, 0) then
    redis.call('ZADD', p .. ':iwake', at, addr)
    timer_at(p, at, 'iwake')
  end
end

-- An address unused this long is forgotten: its gate's keys expire (not the
-- gate hash while it holds an operator's override: st is its HMGET of
-- s, wk, xc, xd, xp).
local IP_IDLE_MS = 3600000
local function ip_keep(key, ms, st)
  if st and (st[3] or st[4] or st[5]) then return end
  redis.call('PEXPIRE', key, ms)
end

-- How many more requests an address has room for: its concurrency less its
-- requests in flight and its places reserved (both cleaned of those that ran out).
local function ip_room(in_flight, reserved, conc, now)
  redis.call('ZREMRANGEBYSCORE', in_flight, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', reserved, '-inf', now)
  return conc - redis.call('ZCARD', in_flight) - redis.call('ZCARD', reserved)
end

-- Pop up to room hosts from the head of an address's queue (KEYS as
-- ipgate.lua: gate, in flight, queue, reservations), reserve a place for
-- each (reserve_ms, with a concurrency limit) and space their starts by the
-- delay (the gate's wk: the last wake handed out). st is the gate's HMGET of
-- s, wk, xc, xd, xp. Returns {at_ms, "P\nHOST", ...}: whom the caller wakes
-- in its partition (ipwake.lua), and from when it may start.
local function ip_pop_waiters(keys, room, conc, delay, st, reserve_ms, now)
  local woken = redis.call('ZPOPMIN', keys[3], room)
  local out = {}
  local at, wk = math.max(now, num(st[1], 0)), num(st[2], 0)
  for j = 1, #woken, 2 do
    if delay > 0 then
      at = math.max(at, wk + delay)
      wk = at
    end
    if conc > 0 then redis.call('ZADD', keys[4], at + reserve_ms, woken[j]) end
    out[#out + 1] = at
    out[#out + 1] = woken[j]
  end
  if conc > 0 and #woken > 0 then ip_keep(keys[4], IP_IDLE_MS) end
  if delay > 0 and #woken > 0 then
    redis.call('HSET', keys[1], 'wk', wk)
    ip_keep(keys[1], IP_IDLE_MS, st)
  end
  return out
end

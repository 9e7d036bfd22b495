-- Admit URLs into one partition: dedup, per-host budget and push, atomically.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  the partition prefix "{ns/pN}"
-- ARGV[2]  the crawl's limits, a JSON object by name (scriptargs.admit_limits):
--          concurrency and delay_ms, a new host's defaults; admit_max, the
--          per-site budget of admitted URLs (0: none), one for all schemes
--          and ports of a name; inlink_boost, the priority an inlink adds to
--          a queued URL (0: off; see below); await_first (true: adaptive
--          pacing is on, so a new site takes one request at a time until its
--          first answer, common.lua site_concurrency)
-- then 7 values per URL (positional: the entry is binary):
--   seen bucket, seen member (int64 as text), host key, priority,
--   entry (16-byte fingerprint .. JSON record), host config ("" or
--   "conc:delay_ms", or "conc:delay_ms:pages:bytes:ms", the site's own
--   budget, each "" for none: SITE_RULES), written when the site is new,
--   the host's registered domain
-- A URL of a dropped host (field b = 1, set by drop_host.lua) is refused
-- before the seen set is touched, so requeueing the host admits it later;
-- so is one of a host whose site or domain spent its budget (b = "q",
-- claim.lua's budget job), counted apart.
-- A new URL of a parked host (b = "p": its robots.txt stayed unreachable, or
-- its breaker opened too often; pr holds the reason) is
-- a dead letter at once, next to the host's others, so that links to it do
-- not keep a finite crawl open; requeueing the host brings them all back.
-- Inlinks (FRONTIER_INLINK_PRIORITY): while on, a queued URL is raised in
-- its host's queue by inlink_boost for each link to it found after its own
-- admission (a duplicate here, or an entry of its bare fingerprint: a link
-- its worker knew it had offered, counted without asking the seen set), so
-- that under a budget a host's most linked pages go first. The host's
-- PP:qm:HOST hash finds the queue member of a fingerprint; a claim, or the
-- end of the queue, forgets it.
-- A duplicate whose record names when its page last changed ("lm", epoch
-- s: a sitemap's lastmod) brings the URL's revisit forward when the page
-- changed after its last fetch (bring_forward below).
-- Returns {added, duplicates, refused (budget of admitted URLs), blocked,
-- parked, over a spent budget, the soonest time it made anything due (ms,
-- -1: none; common.lua note_due), revisits brought forward}.
local p = ARGV[1]
local limits = cjson.decode(ARGV[2])
local conc0, delay0 = num(limits.concurrency, 1), num(limits.delay_ms, 0)
local budget, boost = num(limits.admit_max, 0), num(limits.inlink_boost, 0)
await_first = limits.await_first == true
local inlinks, inlink_hosts = {}, {}  -- host -> {fingerprint -> links found}
local added, dups, refused, hosts, blocked, parked, spent = 0, 0, 0, 0, 0, 0, 0
local forward, seeds = 0, 0
local parked_reason = '{"reason": "robots-unreachable", "error": "host parked"}'
-- The partition's queue sequence, its last time mark (seconds; see the end)
-- and the counts this script changes: read once, when the first URL is
-- added, and written once at the end.
local COUNTED = {N.seq, N.mark, N.queued, N.dup, N.refused, N.hosts, N.blocked, N.dead, N.budget,
                 N.seeds}
local counted = nil
local seq, mark = nil, nil

-- First each URL: a dropped host's are refused, the seen set dedups, a
-- parked host's new ones are dead letters; the others are gathered by host,
-- in the order they came. Then each host's at once: its record, its budget,
-- one ZADD, its counts and its place in the ready set.
local flags, known, order, groups = {}, {}, {}, {}
local function inlink(host, fp)
  local links = inlinks[host]
  if not links then
    links = {}
    inlinks[host] = links
    inlink_hosts[#inlink_hosts + 1] = host
  end
  links[fp] = (links[fp] or 0) + 1
end
-- A done URL waiting for its revisit whose page changed at lm (s) by its
-- site's word: if that is after its last fetch (its revisit's due time less
-- its interval, the record's "v"), the revisit is due now. PP:vm:HOST finds
-- the revisit entry of a fingerprint (release.lua keeps it for records with
-- an "lm"). 1 if brought forward.
local function bring_forward(host, fp, lm)
  local ventry = redis.call('HGET', p .. ':vm:' .. host, fp)
  if not ventry then return 0 end
  local vk = p .. ':v:' .. host
  local due_s = tonumber(redis.call('ZSCORE', vk, ventry))
  local interval = tonumber(string.match(ventry, '"v":"(%w+)', 17) or '', 36)
  if not due_s or not interval then return 0 end
  if due_s > 100000000000 then due_s = math.floor(due_s / 1000) end  -- (ms: an older build's)
  local now = now_ms()
  local now_s = math.floor(now / 1000)
  if lm <= due_s - interval or due_s <= now_s then return 0 end
  redis.call('ZADD', vk, now_s, ventry)
  local cur = redis.call('ZSCORE', p .. ':vdue', host)
  if not cur or now < num(cur, 0) then
    redis.call('ZADD', p .. ':vdue', now, host)
    timer_at(p, now, 'vdue')
  end
  return 1
end

for i = 3, #ARGV, 7 do
  local bucket, member, host, prio, entry, conf, domain =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  if #entry == 16 then  -- an inlink, nothing to admit
    if boost > 0 then inlink(host, entry) end
  else
  local hk = p .. ':h:' .. host
  local b = flags[host]
  if b == nil then
    local st = redis.call('HMGET', hk, H.blocked, H.queued)
    b = st[1]
    flags[host], known[host] = b, st[2] ~= false  -- (every host record has n)
  end
  if b == '1' then
    blocked = blocked + 1
  elseif b == 'q' then
    spent = spent + 1
  elseif redis.call('SADD', p .. ':s:' .. bucket, member) == 0 then
    dups = dups + 1
    if boost > 0 then inlink(host, string.sub(entry, 1, 16)) end
    local lm = tonumber(string.match(entry, '"lm":(%d+)', 17))
    if lm then forward = forward + bring_forward(host, string.sub(entry, 1, 16), lm) end
  elseif b == 'p' then
    local reason = redis.call('HGET', hk, H.parked_reason) or parked_reason
    dead_letter(KEYS[1], p, string.sub(entry, 1, 16), host, reason, entry)
    parked = parked + 1
  else
    local grp = groups[host]
    if not grp then
      grp = {conf = conf, domain = domain, size = 0}
      groups[host] = grp
      order[#order + 1] = host
    end
    grp.size = grp.size + 1
    grp[grp.size] = {prio, entry}
  end
  end  -- (an inlink)
end

local ZADD_CHUNK = 500  -- members per ZADD (Lua's unpack has a limit)
for _, host in ipairs(order) do
  local grp = groups[host]
  local c, d, own = conc0, delay0, nil
  if grp.conf ~= '' then
    local a, b, rest = string.match(grp.conf, '^(%d+):(%d+):?(.*)$')
    c, d = tonumber(a) or conc0, tonumber(b) or delay0
    if rest and rest ~= '' then own = rest end
  end
  hosts = hosts + ensure_host(p, host, c, d, grp.domain, known[host], own)
  local sk = site_key(p, host)
  -- The site's count of admitted URLs moves first; what goes past the
  -- budget is taken back off it (one command while the budget holds).
  local n = grp.size
  local over = math.max(0, math.min(n, budget > 0 and hincr(sk, S.admitted, n) - budget or 0))
  if over > 0 then
    hincr(sk, S.admitted, -over)
    refused = refused + over
    n = n - over
  end
  if n > 0 then
    local q = p .. ':q:' .. host
    local args = {}
    if not seq then
      counted = record(KEYS[1], COUNTED)
      seq, mark = num(counted[N.seq], 0), num(counted[N.mark], nil)
    end
    local found = {}  -- fingerprint -> entry, for the inlinks to come
    for j = 1, n do
      seq = seq + 1
      args[#args + 1] = queue_score(grp[j][1], seq)
      args[#args + 1] = grp[j][2]
      if string.find(grp[j][2], '"broad_seed"', 17, true)
          and not string.find(grp[j][2], '"redirect_urls"', 17, true) then
        seeds = seeds + 1  -- (a seed's redirect target is the same seed, not another)
      end
      if boost > 0 then
        found[#found + 1] = string.sub(grp[j][2], 1, 16)
        found[#found + 1] = grp[j][2]
      end
      if #args >= 2 * ZADD_CHUNK or j == n then
        redis.call('ZADD', q, unpack(args))
        if #found > 0 then redis.call('HSET', p .. ':qm:' .. host, unpack(found)) end
        args, found = {}, {}
      end
    end
    if budget <= 0 then hincr(sk, S.admitted, n) end
    -- A host with URLs queued before is where it belongs already (in the
    -- ready set, or waiting for its domain, its address or its robots.txt):
    -- more of them change nothing there.
    if hincr(p .. ':h:' .. host, H.queued, n) <= n then refresh_host(p, host) end
    added = added + n
  end
end

-- The inlinks found, host by host: which of the URLs are queued (PP:qm), their
-- scores, and one ZADD XX raising them (a URL claimed or ended meanwhile is
-- left alone). (after the admissions: a URL and a link to it in one batch)
for _, host in ipairs(inlink_hosts) do
  local fps, counts_of = {}, inlinks[host]
  for fp in pairs(counts_of) do fps[#fps + 1] = fp end
  for j = 1, #fps, ZADD_CHUNK do
    local part = {unpack(fps, j, math.min(j + ZADD_CHUNK - 1, #fps))}
    local members = redis.call('HMGET', p .. ':qm:' .. host, unpack(part))
    local queued, whose = {}, {}
    for k, entry in ipairs(members) do
      if entry then
        queued[#queued + 1] = entry
        whose[#whose + 1] = part[k]
      end
    end
    if #queued > 0 then
      local scores = redis.call('ZMSCORE', p .. ':q:' .. host, unpack(queued))
      local args = {'XX'}
      for k, score in ipairs(scores) do
        if score then
          args[#args + 1] = tonumber(score) - boost * counts_of[whose[k]] * 4294967296
          args[#args + 1] = queued[k]
        end
      end
      if #args > 1 then redis.call('ZADD', p .. ':q:' .. host, unpack(args)) end
    end
  end
end

local w = {}
if added > 0 then
  -- Time marks: queue scores are sequence numbers, so ":e" maps the first
  -- sequence number admitted at a time (score) to that time in seconds
  -- (member), one mark per 10 s at most; `scrapy frontier status` finds the
  -- age of a queued URL from the last mark at or before its number.
  -- (The last mark's time is kept in N.mark too; a frontier without it reads
  -- the set.)
  local now_s = math.floor(now_ms() / 1000)
  if not mark then
    local last = redis.call('ZRANGE', p .. ':e', -1, -1)
    mark = #last > 0 and tonumber(last[1]) or nil
  end
  if not mark or now_s - mark >= 10 then
    redis.call('ZADD', p .. ':e', seq - added + 1, now_s)
    w[N.mark] = now_s
  end
  w[N.seq] = seq
end
-- (counts read with the sequence are written with it; without it, a count
-- or two move by themselves)
for name, n in pairs({[N.queued] = added, [N.dup] = dups, [N.refused] = refused,
                      [N.hosts] = hosts, [N.blocked] = blocked, [N.dead] = parked,
                      [N.budget] = spent, [N.seeds] = seeds}) do
  if n > 0 and counted then
    w[name] = num(counted[name], 0) + n
  elseif n > 0 then
    hincr(KEYS[1], name, n)
  end
end
hset_fields(KEYS[1], w)
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return {added, dups, refused, blocked, parked, spent, due_reply(), forward}

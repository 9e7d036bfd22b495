-- What the pages of a host say about its URLs: weigh the evidence, learn a
-- host's noise parameters and refuse its trap patterns (crawler/learning/).
--
-- Everything a host has taught lives in PP:k:HOST (a hash), shared by every
-- worker and kept across restarts:
--   r          the noise parameters learned (space-separated)
--   x          the URL patterns refused as traps (one per line)
--   f          identities fetched only as a spelling with a noise parameter
--              (their keys): a link to one is not fetched again
--   cs, co     pages whose canonical link names the page itself (or itself
--              without some parameters), or another page
--   cm         "TARGET KEY...": the first other page named, and the pages
--              (up to three) that named it;
--   cu         1 once three pages named one other page: the host's canonical
--              links all point to one page, and say nothing about parameters
--   n:P        the pages whose canonical link dropped P (their keys, at most
--              learn_min of them); m:P pages whose payload equals the page
--              without P; k:P evidence that P matters (a canonical link that
--              keeps it, a payload that differs): any blocks the rule
--   d:KEY      a fetched page's payload digest; w:KEY "P DIGEST": the first
--              page fetched at KEY plus P, to compare with KEY when it comes
--   t:PATTERN  "PAGES ALIKE SKETCH..." the pages of a pattern, how many of
--              them were near-duplicates of an earlier one, the last sketches
-- New evidence fields stop at max_fields per host (a hostile host cannot
-- grow it without bound); r and x always fit.
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix, ARGV[2] learn_min, ARGV[3] max_fields, ARGV[4] alike
--          pages, ARGV[5] alike share (percent), ARGV[6] sketch distance
-- ARGV[7..] per host: host, n, then n observations of 3 values (op, a, b),
-- each page's starting with its D:
--   D key digest   the page's own key and payload digest. A page fetched
--                  before (its d:KEY is there: a revisit, a new crawl on the
--                  same frontier) says nothing new: its other ops are skipped
--   C rel "TARGET KEY"  the page's canonical link: s (itself), d (itself
--                  without parameters), o (another page: TARGET its key)
--   N P base       its canonical link dropped P (base: the page's key without P)
--   K P -          its canonical link kept P
--   V P "BASE DIGEST"  the page is BASE plus P, and its payload digest
--   T pattern sketch  the page's URL pattern and text sketch
-- Returns {news, rules}: news, 4 values each: host, "learned" | "withdrawn" |
-- "trap", the parameter or pattern, a detail for the log; and each host's
-- rules as they stand now, 4 values each: host, r, x, f (so that every worker
-- crawling a host has its rules within a batch, whoever learned them).
local p = ARGV[1]
local learn_min, max_fields = tonumber(ARGV[2]), tonumber(ARGV[3])
local alike_pages, alike_share = tonumber(ARGV[4]), tonumber(ARGV[5])
local max_distance = tonumber(ARGV[6])
local news, current = {}, {}

local function words(s)
  local out = {}
  for w in string.gmatch(s or '', '%S+') do out[#out + 1] = w end
  return out
end

local function has(list, value)
  for _, v in ipairs(list) do if v == value then return true end end
  return false
end

-- Bits that differ between two 64-bit sketches (16 hex characters).
local function distance(a, b)
  local n = 0
  for i = 1, 9, 8 do
    local x = bit.bxor(tonumber(string.sub(a, i, i + 7), 16), tonumber(string.sub(b, i, i + 7), 16))
    while x ~= 0 do
      x = bit.band(x, x - 1)
      n = n + 1
    end
  end
  return n
end

local function learn_host(host, items)
  local fk = p .. ':k:' .. host
  local room = max_fields - redis.call('HLEN', fk)
  local touched = {}

  local function set_new(field, value)
    if room > 0 then
      if redis.call('HSETNX', fk, field, value) == 1 then room = room - 1 end
    end
  end
  local function incr(field)
    if room > 0 or redis.call('HEXISTS', fk, field) == 1 then
      if hincr(fk, field, 1) == 1 then room = room - 1 end
    end
  end
  local function agree(param) incr('m:' .. param); touched[param] = true end
  local function against(param) incr('k:' .. param); touched[param] = true end
  local function compare(param, mine, theirs)
    if mine == theirs then agree(param) else against(param) end
  end

  local function canonical(rel, arg)
    if rel ~= 'o' then incr('cs'); return end
    incr('co')
    local target, page = string.match(arg, '^(%S+) (%S+)$')
    local cm = words(redis.call('HGET', fk, 'cm'))
    if #cm == 0 then
      redis.call('HSET', fk, 'cm', target .. ' ' .. page)
    elseif cm[1] == target and #cm < 4 and not has(cm, page) then
      cm[#cm + 1] = page
      redis.call('HSET', fk, 'cm', table.concat(cm, ' '))
      if #cm == 4 and redis.call('HGET', fk, 'cu') ~= '1' then
        redis.call('HSET', fk, 'cu', 1)
        for _, param in ipairs(words(redis.call('HGET', fk, 'r'))) do touched[param] = true end
      end
    end
  end

  local function dropped(param, base)
    touched[param] = true
    local field = 'n:' .. param
    local bases = words(redis.call('HGET', fk, field))
    if #bases < learn_min and not has(bases, base) then
      bases[#bases + 1] = base
      if #bases == 1 then set_new(field, base) else redis.call('HSET', fk, field, table.concat(bases, ' ')) end
    end
  end

  local function variant(param, arg)
    local base, digest = string.match(arg, '^(%S+) (%S+)$')
    local known = redis.call('HGET', fk, 'd:' .. base)
    if known then compare(param, digest, known); return end
    -- BASE not fetched yet: kept for when it is (digest_of)
    local first = words(redis.call('HGET', fk, 'w:' .. base))
    if #first == 0 then
      set_new('w:' .. base, param .. ' ' .. digest)
    elseif first[1] == param and first[2] ~= digest then
      against(param)  -- two values of P, two different pages
    end
  end

  -- Whether the page is new (its first fetch): only then does it teach.
  local function digest_of(key, digest)
    if redis.call('HEXISTS', fk, 'd:' .. key) == 1 then
      redis.call('HSET', fk, 'd:' .. key, digest)
      return false
    end
    set_new('d:' .. key, digest)
    local first = words(redis.call('HGET', fk, 'w:' .. key))
    if #first == 2 then
      compare(first[1], first[2], digest)
      redis.call('HDEL', fk, 'w:' .. key)
      room = room + 1
    end
    return true
  end

  local function trap(pattern, sketch)
    local refused = redis.call('HGET', fk, 'x') or ''
    if string.find('\n' .. refused .. '\n', '\n' .. pattern .. '\n', 1, true) then return end
    local field = 't:' .. pattern
    local state = words(redis.call('HGET', fk, field))
    if #state == 0 and room <= 0 then return end
    local pages, alike = num(state[1], 0) + 1, num(state[2], 0)
    local sketches = {}
    for i = 3, #state do sketches[#sketches + 1] = state[i] end
    local near = false
    for _, s in ipairs(sketches) do
      if distance(s, sketch) <= max_distance then near = true; break end
    end
    if near then
      alike = alike + 1
    else
      sketches[#sketches + 1] = sketch
      if #sketches > 8 then table.remove(sketches, 1) end
    end
    if alike >= alike_pages and alike * 100 >= alike_share * pages then
      redis.call('HSET', fk, 'x', refused == '' and pattern or refused .. '\n' .. pattern)
      redis.call('HDEL', fk, field)
      news[#news + 1] = host; news[#news + 1] = 'trap'
      news[#news + 1] = pattern; news[#news + 1] = alike .. ' of ' .. pages .. ' pages alike'
      return
    end
    if #state == 0 then room = room - 1 end
    redis.call('HSET', fk, field, pages .. ' ' .. alike .. ' ' .. table.concat(sketches, ' '))
  end

  local new_page = true
  for _, it in ipairs(items) do
    local op, a, b = it[1], it[2], it[3]
    if op == 'D' then new_page = digest_of(a, b)
    elseif not new_page then  -- a page fetched before: nothing new
    elseif op == 'C' then canonical(a, b)
    elseif op == 'N' then dropped(a, b)
    elseif op == 'K' then against(a)
    elseif op == 'V' then variant(a, b)
    elseif op == 'T' then trap(a, b)
    end
  end

  -- The pages that taught P by their canonical link were fetched with P:
  -- their identity without it, if never fetched itself, is fetched all the
  -- same (f, at most 256), so a queued link to it is not one more request.
  local function remember_fetched(param)
    local fetched = words(redis.call('HGET', fk, 'f'))
    for _, base in ipairs(words(redis.call('HGET', fk, 'n:' .. param))) do
      if #fetched < 256 and redis.call('HEXISTS', fk, 'd:' .. base) == 0
          and not has(fetched, base) then
        fetched[#fetched + 1] = base
      end
    end
    if #fetched > 0 then redis.call('HSET', fk, 'f', table.concat(fetched, ' ')) end
  end

  -- Decide for every parameter the pages spoke of: noise once learn_min
  -- observations agree (a canonical link alone: from learn_min different
  -- pages) and nothing says otherwise.
  local rules = words(redis.call('HGET', fk, 'r'))
  local trusted = redis.call('HGET', fk, 'cu') ~= '1'
  local changed = false
  for param, _ in pairs(touched) do
    local against_n = num(redis.call('HGET', fk, 'k:' .. param), 0)
    local same = num(redis.call('HGET', fk, 'm:' .. param), 0)
    local bases = trusted and #words(redis.call('HGET', fk, 'n:' .. param)) or 0
    local noise = against_n == 0 and same + bases >= learn_min
      and (same > 0 or bases >= learn_min)
    local known = has(rules, param)
    if noise and not known then
      rules[#rules + 1] = param
      changed = true
      remember_fetched(param)
      news[#news + 1] = host; news[#news + 1] = 'learned'; news[#news + 1] = param
      news[#news + 1] = bases .. ' canonical link(s), ' .. same .. ' identical payload(s)'
    elseif known and not noise then
      local kept = {}
      for _, r in ipairs(rules) do if r ~= param then kept[#kept + 1] = r end end
      rules = kept
      changed = true
      redis.call('HDEL', fk, 'f')  -- whatever the rules covered may be fetched again
      news[#news + 1] = host; news[#news + 1] = 'withdrawn'; news[#news + 1] = param
      news[#news + 1] = against_n > 0 and 'evidence that it matters' or 'canonical links unreliable'
    end
  end
  if changed then
    table.sort(rules)
    redis.call('HSET', fk, 'r', table.concat(rules, ' '))
  end
  local now = redis.call('HMGET', fk, 'r', 'x', 'f')
  current[#current + 1] = host
  for j = 1, 3 do current[#current + 1] = now[j] or '' end
end

local i = 7
while i <= #ARGV do
  local host, n = ARGV[i], tonumber(ARGV[i + 1])
  local items = {}
  for j = 0, n - 1 do
    local at = i + 2 + j * 3
    items[#items + 1] = {ARGV[at], ARGV[at + 1], ARGV[at + 2]}
  end
  learn_host(host, items)
  i = i + 2 + n * 3
end
if #news > 0 then
  local learned, traps = 0, 0
  for j = 2, #news, 4 do
    if news[j] == 'learned' then learned = learned + 1 elseif news[j] == 'trap' then traps = traps + 1 end
  end
  if learned > 0 then hincr(KEYS[1], 'rules', learned) end
  if traps > 0 then hincr(KEYS[1], 'traps', traps) end
end
return {news, current}

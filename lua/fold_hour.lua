--[[
  fold_hour: folds a closed hour into counts: the figures `activity` reports for it (active,
  returning, new: as activity_periods counts them) and its row of hourly retention as a
  cohort (as retention counts it), into its day's record; the day's first-timers active in it
  join those of the day's folded hours (KEYS[6]), which the day's later hours leave out of
  their new users in place of the folded hours' bitmaps. Its bitmap is then kept as it was,
  under its frozen name, which no write reaches, while the next hour's fold or figures still
  read it; and the frozen bitmaps of hours that nothing reads any more are deleted.

  KEYS[1]  record     hash  field=hour start, ms  value="active returning new retained_1 ..."
                      (retained_k: the cohort's users active k hours later; trailing zeros
                      left out): the folded hours of the hour's day
  KEYS[2]  cohort     bitmap, deleted before returning
  KEYS[3]  scratch    bitmap, deleted before returning
  KEYS[4]  first_day  bitmap of the users first active on the hour's day
  KEYS[5]  day        bitmap of the users active on the hour's day: where it does not exist
                      and the hour has no bitmap, nobody was active that day and nothing is
                      written for the hour (an empty shard or deployment keeps no records)
  KEYS[6]  seen       bitmap of the users first active on the hour's day who were active in
                      one of its folded hours; this hour's join them (missing where none are,
                      and for a day whose hours were folded before this bitmap was kept, whose
                      folded hours' frozen bitmaps are read instead)
  KEYS[7..]  keys     pairs (live bitmap, frozen bitmap) of hours: the hour, the hour before
                      it, the day's earlier hours (ARGV[3] of them), the hours after it
                      (ARGV[4] of them); then the records that the guard names (ARGV[5] of
                      them); then the frozen and live bitmaps to delete once every hour the
                      guard names is folded. A pair's frozen bitmap, where it exists, is the
                      hour's bitmap as it was folded: it is read instead of the live one
  ARGV[1]  start          int ms: the hour's start, its field in `record`
  ARGV[2]  keep_until_ms  int ms: when `record` expires (its day's last hour's bitmap would)
  ARGV[3]  earlier        int: how many of the day's hours come before this one
  ARGV[4]  later          int: how many hours after it are given (at most 52)
  ARGV[5]  records        int: how many records the guard names
  ARGV[6..5+earlier]  starts  int ms: the day's earlier hours' starts, their fields in `record`
  ARGV[6+earlier..]  guard       "r start": the hours (the record's place among the records given,
                          1-based, and the hour's start) that must all be folded before the
                          bitmaps to delete go: every hour whose fold or figures read them (an
                          hour of a day with no record at all had nobody active, and needs none)
  Returns  {folded, deleted}: 1 if the hour was folded now (0: it was already, or its day had
           nobody active), and how many bitmaps were deleted
  Work     about 6 + ARGV[4] BITOPs and BITCOUNTs over bitmaps of (highest user index / 8)
           bytes (none after an empty cohort), an HEXISTS per guard entry (at most 77)
]]
--- @include "first_timers"
local record_key, cohort_key, scratch_key, first_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local day_key, seen_key = KEYS[5], KEYS[6]
local start, keep_until_ms = ARGV[1], tonumber(ARGV[2])
local earlier, later, records = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])

if redis.call('HEXISTS', record_key, start) == 1 then return {0, 0} end

-- The bitmap of the i-th pair: as it was folded, if it was.
local function bitmap(i)
  local live, frozen = KEYS[5 + 2 * i], KEYS[6 + 2 * i]
  if redis.call('EXISTS', frozen) == 1 then return frozen end
  return live
end

local hour_key, before_key = bitmap(1), bitmap(2)
-- The hour's figures and its cohort's row, into the record; the hour then reads as folded.
local function fold()
  local active = redis.call('BITCOUNT', hour_key)
  local returning = 0
  if active > 0 then
    redis.call('BITOP', 'AND', scratch_key, hour_key, before_key)
    returning = redis.call('BITCOUNT', scratch_key)
  end
  -- The cohort: first active that day, in this hour, and in none of the day's earlier hours
  -- (as retention.lua's; activity's new users of the hour are the same users).
  redis.call('BITOP', 'AND', cohort_key, first_key, hour_key)
  -- The day's earlier hours' pairs start at KEYS[11], after the hour's and the hour before's.
  local starts = {unpack(ARGV, 6, 5 + earlier)}
  if earlier_first_timers(scratch_key, first_key, seen_key, record_key, 11, starts) then
    redis.call('BITOP', 'OR', seen_key, scratch_key, cohort_key)
    if active > 0 then
      redis.call('BITOP', 'AND', scratch_key, scratch_key, cohort_key)
      redis.call('BITOP', 'XOR', cohort_key, cohort_key, scratch_key)
    end
  else
    redis.call('BITOP', 'OR', seen_key, cohort_key)
  end
  if redis.call('EXISTS', seen_key) == 1 then redis.call('PEXPIREAT', seen_key, keep_until_ms) end
  local size = redis.call('BITCOUNT', cohort_key)
  local row, last = {active, returning, size}, 3
  if size > 0 then
    for k = 1, later do
      redis.call('BITOP', 'AND', scratch_key, cohort_key, bitmap(2 + earlier + k))
      row[3 + k] = redis.call('BITCOUNT', scratch_key)
      if row[3 + k] > 0 then last = 3 + k end
    end
  end
  redis.call('HSET', record_key, start, table.concat(row, ' ', 1, last))
  redis.call('PEXPIREAT', record_key, keep_until_ms)
  redis.call('DEL', cohort_key, scratch_key)
  -- From now on the hour is read as it was folded: a later write into it reaches the live
  -- bitmap only, which expires by itself.
  if redis.call('EXISTS', KEYS[7]) == 1 then redis.call('RENAME', KEYS[7], KEYS[8]) end
end

-- An hour with no bitmap, of a day with nobody active, needs no record: none is written, so
-- that a shard or deployment with no activity keeps nothing.
local folded = 0
if redis.call('EXISTS', hour_key) == 1 or redis.call('EXISTS', day_key) == 1 then
  fold()
  folded = 1
end

local pairs_end = 6 + 2 * (2 + earlier + later)
for g = 6 + earlier, #ARGV do
  local r, hour = string.match(ARGV[g], '^(%d+) (%d+)$')
  local guard_record = KEYS[pairs_end + tonumber(r)]
  if redis.call('HEXISTS', guard_record, hour) == 0 and redis.call('EXISTS', guard_record) == 1 then
    return {folded, 0}
  end
end
local first_delete = pairs_end + records + 1
if first_delete > #KEYS then return {folded, 0} end
return {folded, redis.call('DEL', unpack(KEYS, first_delete, #KEYS))}

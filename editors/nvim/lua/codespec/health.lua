-- :checkhealth codespec
local M = {}

local function version_of(executable)
  local ok, result = pcall(function()
    return vim.system({ executable, "--version" }, { text = true }):wait(10000)
  end)
  if not ok or not result or result.code ~= 0 then
    return nil
  end
  return vim.trim(result.stdout or "")
end

function M.check()
  local health = vim.health
  local codespec = require("codespec")
  local compat = require("codespec.compat")
  local config = codespec.config

  health.start("codespec: Neovim")
  if compat.has_native_inline then
    health.ok("native inline completion (vim.lsp.inline_completion)"
      .. (codespec.uses_native() and "" or ", but the plugin's ghost text is configured (native = false)"))
  elseif vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. tostring(vim.version()) .. ": the plugin's own ghost text (no native inline completion)")
  else
    health.error("Neovim 0.10 or newer is needed")
  end

  health.start("codespec: server")
  local executable = config.cmd[1]
  local path = vim.fn.exepath(executable)
  if path == "" then
    health.error(("`%s` not found on $PATH"):format(executable),
      { "pip install codespec (or `make venv` in a checkout)", "or set cmd = { '/path/to/codespec', 'serve', '--stdio' }" })
    return
  end
  health.ok(("server command: %s (%s)"):format(table.concat(codespec.server_cmd(config), " "), path))
  local version = version_of(path)
  if version then
    health.ok("version: " .. version)
  else
    health.warn(("`%s --version` failed"):format(path))
  end

  local client = codespec.get_client()
  if not client then
    health.info("not attached yet: open a file of a configured filetype (" .. table.concat(config.filetypes, ", ") .. ")")
    return
  end
  health.ok(("attached: client %d, %s"):format(client.id,
    client.server_info and (client.server_info.name .. " " .. tostring(client.server_info.version)) or "?"))
  local stats = codespec.stats(5000)
  if not stats.server then
    health.warn("codespec/stats: " .. tostring(stats.error))
    return
  end
  local engine = type(stats.server.engine) == "table" and stats.server.engine or {}
  if engine.loaded then
    health.ok("model loaded: " .. tostring(engine.model)
      .. (engine.draftModel and engine.draftModel ~= vim.NIL and (", draft " .. tostring(engine.draftModel)) or ""))
  else
    health.warn("model not loaded yet: " .. tostring(engine.model)
      .. " (it loads at start, or on the first request with loadModels = \"lazy\"; see the LSP log)")
  end
  for _, line in ipairs(codespec.stats_lines(stats)) do
    health.info(line)
  end
end

return M

-- codespec: inline (ghost text) code completion from `codespec serve --stdio`.
-- Neovim >= 0.12 uses the native vim.lsp.inline_completion; 0.10 / 0.11 use codespec.ghost.
local compat = require("codespec.compat")

local M = {}

M.defaults = {
  cmd = { "codespec", "serve", "--stdio" },
  -- Server options, sent as initializationOptions; nil leaves the server's own default.
  model = nil, -- target model spec, e.g. "bundled:qwen2.5-coder-1.5b" or "tiny"
  draft_model = nil, -- draft model spec, e.g. "bundled:qwen2.5-coder-0.5b" ("none": no draft model)
  drafting = nil, -- "none" | "lookup" | "model" | "both"
  device = nil, -- "auto" | "cpu" | "cuda" | "mps"
  engine = nil, -- a serving engine's URL (llama-server, vLLM, SGLang) instead of local models
  engine_model = nil, -- the model name the engine serves (nil: the one it lists)
  streaming = false, -- ghost text grows while the server generates (codespec/partialCompletion)
  init_options = {}, -- any other server option (see docs/server.md), e.g. { maxTokens = 64 }
  filetypes = {
    "python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust", "java",
    "c", "cpp", "ruby", "lua", "sh", "bash",
  },
  root_markers = { ".git", "pyproject.toml", "package.json", "go.mod", "Cargo.toml" },
  debounce_ms = 75,
  native = "auto", -- "auto": native inline completion when Neovim has it; false: always the plugin's own
  hl_group = "CodespecSuggestion",
  keymaps = {
    accept = "<Tab>", -- falls back to the key's normal meaning when no suggestion is shown
    accept_word = "<M-Right>",
    accept_line = "<M-C-Right>",
    dismiss = "<C-]>",
  },
}

M.config = vim.deepcopy(M.defaults)
M.enabled = true

function M.server_cmd(config)
  return vim.deepcopy(config.cmd)
end

--- initializationOptions for the server: the named options that are set, then `init_options`.
function M.init_options(config)
  local options = {
    model = config.model,
    draftModel = config.draft_model or config.draft, -- `draft`: the deprecated spelling (one release)
    drafting = config.drafting,
    device = config.device,
    engine = config.engine,
    engineModel = config.engine_model,
    -- Native inline completion cannot show partial text: streaming only feeds the plugin's ghost text.
    streaming = config.streaming and not M.uses_native(config),
  }
  return vim.tbl_extend("force", options, config.init_options or {})
end

function M.uses_native(config)
  config = config or M.config
  if config.native == "auto" then
    return compat.has_native_inline
  end
  return config.native == true and compat.has_native_inline
end

local function lsp_config(config)
  local ghost = require("codespec.ghost")
  return {
    name = "codespec",
    cmd = M.server_cmd(config),
    filetypes = config.filetypes,
    root_markers = config.root_markers,
    init_options = M.init_options(config),
    handlers = {
      ["codespec/partialCompletion"] = function(_, params, ctx)
        ghost.on_partial(params, ctx)
      end,
    },
  }
end

--- Neovim 0.10 has no vim.lsp.config / vim.lsp.enable: start the client from a FileType autocmd.
local function start_on_filetype(config)
  local group = vim.api.nvim_create_augroup("codespec_start", { clear = true })
  local client_config = lsp_config(config)
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = config.filetypes,
    callback = function(args)
      if not M.enabled or vim.bo[args.buf].buftype ~= "" then
        return
      end
      local start_config = vim.deepcopy(client_config)
      start_config.root_dir = vim.fs.root(args.buf, config.root_markers)
      vim.lsp.start(start_config, { bufnr = args.buf })
    end,
  })
end

local function start_client(config)
  if vim.lsp.config and vim.lsp.enable then
    vim.lsp.config("codespec", lsp_config(config))
    vim.lsp.enable("codespec")
  else
    start_on_filetype(config)
  end
end

--- The <Tab> of Neovim >= 0.12: accept the native suggestion when one is shown, else a normal <Tab>.
local function map_native_accept(key)
  vim.keymap.set("i", key, function()
    if not vim.lsp.inline_completion.get() then
      return key
    end
  end, { expr = true, replace_keycodes = true, desc = "codespec: accept suggestion" })
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts or {})
  if M.config.draft ~= nil then
    vim.notify_once("codespec: `draft` is deprecated and will be removed; use `draft_model`", vim.log.levels.WARN)
  end
  vim.api.nvim_set_hl(0, "CodespecSuggestion", { link = "Comment", default = true })
  start_client(M.config)
  if M.uses_native(M.config) then
    vim.lsp.inline_completion.enable(true)
    if M.config.keymaps.accept then
      map_native_accept(M.config.keymaps.accept)
    end
  else
    require("codespec.ghost").setup(M.config)
  end
end

function M.get_client(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr or 0, name = "codespec" })[1]
    or vim.lsp.get_clients({ name = "codespec" })[1]
end

function M.set_enabled(enabled)
  M.enabled = enabled
  if M.uses_native() then
    vim.lsp.inline_completion.enable(enabled)
  elseif not enabled then
    require("codespec.ghost").dismiss()
  end
end

--- Server-side stats (`codespec/stats`) and, without native inline completion, the plugin's counters.
function M.stats(timeout_ms)
  local client = M.get_client()
  local server, err = nil, nil
  if client then
    local response, request_err = compat.request_sync(client, "codespec/stats", vim.empty_dict(), timeout_ms or 2000)
    if response and response.result then
      server = response.result
    else
      err = (response and response.err and response.err.message) or request_err or "no answer"
    end
  else
    err = "codespec is not attached"
  end
  local plugin = (not M.uses_native()) and require("codespec.ghost").counters or nil
  return { server = server, plugin = plugin, error = err }
end

local function format_number(value, suffix)
  if type(value) ~= "number" then
    return "-"
  end
  return string.format("%.1f%s", value, suffix or "")
end

--- Human-readable lines for :CodespecStats.
function M.stats_lines(stats)
  local lines = {}
  local server = stats.server
  if server then
    local latency = server.latencyMs or server.latency_ms or {}
    local acceptance = server.acceptanceRate or server.acceptance_rate
    table.insert(lines, string.format("latency p50 %s  p90 %s  p99 %s",
      format_number(latency.p50, " ms"), format_number(latency.p90, " ms"), format_number(latency.p99, " ms")))
    if type(acceptance) == "number" then
      table.insert(lines, string.format("acceptance %s", format_number(acceptance * 100, "%")))
    end
    if type(server.engine) == "table" then
      table.insert(lines, string.format("model %s (%s)", tostring(server.engine.model),
        server.engine.loaded and "loaded" or "not loaded"))
    end
    local tau = type(server.generations) == "table" and server.generations.tau or server.tau
    if type(tau) == "number" then
      table.insert(lines, string.format("tau %s tokens per target forward", format_number(tau)))
    end
    for _, key in ipairs(vim.tbl_keys(server)) do
      local value = server[key]
      if not key:match("^latency") and not key:match("^acceptance") and type(value) ~= "table" then
        table.insert(lines, string.format("%s: %s", key, tostring(value)))
      end
    end
    table.sort(lines, function(a, b)
      local function rank(line)
        return line:match("^latency") and 0 or line:match("^acceptance") and 1 or line:match("^tau") and 2
          or line:match("^model") and 3 or 4
      end
      local ka, kb = rank(a), rank(b)
      return ka ~= kb and ka < kb or (ka == kb and a < b)
    end)
  else
    table.insert(lines, "server: " .. tostring(stats.error))
  end
  if stats.plugin then
    local counters = {}
    for key, value in pairs(stats.plugin) do
      table.insert(counters, key .. "=" .. tostring(value))
    end
    table.sort(counters)
    table.insert(lines, "plugin: " .. table.concat(counters, " "))
  end
  return lines
end

function M.show_stats()
  vim.api.nvim_echo({ { table.concat(M.stats_lines(M.stats()), "\n") } }, true, {})
end

return M

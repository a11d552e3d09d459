# The R side of the code interpreter's stdio protocol (see pydriver.py): run as
# `Rscript --vanilla -e <this file> <nonce>`. Each request line is a cell's
# code in hex (base R decodes no base64); the cell's expressions run in the
# global environment, which persists across cells. Visible values print as at
# R's prompt, the last one as the cell's result; plots go to PNG files, sent
# (in hex) when the cell ends; SIGINT interrupts the cell and is ignored
# between cells. The cell's stdin is not the protocol's: it reads nothing.
local({
  nonce <- commandArgs(trailingOnly = TRUE)[1]
  mark <- paste0("\036", nonce, ":")
  frame <- function(json) {
    cat(mark, json, "\n", sep = "", file = stdout())
    flush(stdout())
  }
  quote_json <- function(text) {
    text <- paste(text, collapse = "\n")
    text <- gsub("\\", "\\\\", text, fixed = TRUE)
    text <- gsub("\"", "\\\"", text, fixed = TRUE)
    text <- gsub("\n", "\\n", text, fixed = TRUE)
    text <- gsub("\r", "\\r", text, fixed = TRUE)
    text <- gsub("\t", "\\t", text, fixed = TRUE)
    text <- gsub("[\001-\037]", "", text, useBytes = TRUE)
    paste0("\"", text, "\"")
  }
  unhex <- function(hex) {
    if (nchar(hex) == 0) return("")
    ends <- seq(2, nchar(hex), 2)
    text <- rawToChar(as.raw(strtoi(substring(hex, ends - 1, ends), 16L)))
    Encoding(text) <- "UTF-8"
    text
  }
  plots <- tempfile("executor-plots-")
  dir.create(plots)
  options(warn = 1, device = function(...) {
    grDevices::png(file.path(plots, "plot-%03d.png"), width = 640, height = 480)
  })
  send_plots <- function() {
    while (!is.null(grDevices::dev.list())) grDevices::dev.off()
    for (path in sort(list.files(plots, full.names = TRUE))) {
      data <- readBin(path, "raw", file.info(path)$size)
      frame(paste0('{"t":"image","mime":"image/png","hex":"',
                   paste(sprintf("%02x", as.integer(data)), collapse = ""), '"}'))
      unlink(path)
    }
  }
  error_frame <- function(name, message, traceback) {
    frame(paste0('{"t":"error","ename":', quote_json(name), ',"evalue":', quote_json(message),
                 ',"traceback":', quote_json(traceback), "}"))
  }
  # The driver's own eval() is no call of the cell's: a message does not name it.
  own_call <- function(call) {
    if (is.null(call) || (is.call(call) && identical(call[[1]], quote(eval)))) NULL else call
  }
  run <- function(code) {
    ok <- TRUE
    tryCatch({
      expressions <- parse(text = code, keep.source = FALSE)
      count <- length(expressions)
      for (index in seq_len(count)) {
        shown <- withCallingHandlers(
          withVisible(eval(expressions[[index]], envir = globalenv())),
          warning = function(warning) {
            call <- own_call(conditionCall(warning))
            where <- if (is.null(call)) "" else paste0(" in ", paste(deparse(call), collapse = " "))
            cat("Warning", where, ": ", conditionMessage(warning), "\n", sep = "", file = stderr())
            invokeRestart("muffleWarning")
          }
        )
        if (shown$visible) {
          if (index == count) {
            plain <- utils::capture.output(print(shown$value))
            frame(paste0('{"t":"result","plain":', quote_json(plain), ',"html":null}'))
          } else {
            print(shown$value)
          }
        }
      }
    }, error = function(error) {
      ok <<- FALSE
      message <- conditionMessage(error)
      call <- own_call(conditionCall(error))
      where <- if (is.null(call)) "" else paste0(" in ", paste(deparse(call), collapse = " "))
      error_frame("Error", message, paste0("Error", where, ": ", message))
    }, interrupt = function(signal) {
      ok <<- FALSE
      error_frame("KeyboardInterrupt", "", "KeyboardInterrupt: the cell was interrupted")
    })
    ok
  }
  requests <- file("stdin", open = "r")
  frame('{"t":"ready"}')
  repeat {
    line <- tryCatch(readLines(requests, n = 1), interrupt = function(signal) NA)
    if (length(line) == 0) break
    if (is.na(line[1])) next
    ok <- FALSE
    tryCatch({
      ok <- run(unhex(line))
      send_plots()
    }, interrupt = function(signal) NULL, error = function(error) NULL)
    flush(stdout())
    frame(if (ok) '{"t":"done","ok":true}' else '{"t":"done","ok":false}')
    cat(mark, "end\n", sep = "", file = stderr())
    flush(stderr())
  }
})

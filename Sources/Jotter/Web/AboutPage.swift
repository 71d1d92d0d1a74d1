/// `GET /about`: the project page a five-star rating opens. Plain HTML, no script, no style.
enum AboutPage {
    static let response = HTTPResponse(status: 200, headers: ["Content-Type": "text/html; charset=utf-8"],
                                       body: Array("""
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>About Jotter</title></head><body>
        <h1>Jotter</h1>
        <p>Thank you! Jotter is Captio for the web: write a thought, press send, and it lands in your own inbox.
        It runs on your machine, keeps every memo sealed in a durable outbox until it is delivered, and never
        delivers one twice.</p>
        <p>Send from scripts too: <code>curl -d "buy milk" localhost:7373</code></p>
        <p><a href="/">Back to writing</a></p>
        </body></html>
        """.utf8))
}

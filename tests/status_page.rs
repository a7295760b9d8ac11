//! The status page at `GET /`, in a real browser: headless Chromium (the
//! Debian package; `.ci/run` installs it) keeps a running cluster's page
//! open while the test kills nodes, and reads what the page shows: the
//! speaker's view through any node, a lock with its holder and data, the
//! failovers, a dead member never shown healthy, a failed list never shown
//! as an empty one, and a banner within 3 s once the page's own node
//! stops answering; nothing logged to the console.

use crate::support;

use std::time::Duration;

use serde_json::json;
use support::browser::Browser;
use support::Cluster;

/// Saves a screenshot of `page` as `name` under the directory
/// `LEASEHOLD_SCREENSHOTS` names, if set (docs/operations.md's pictures:
/// `LEASEHOLD_SCREENSHOTS=docs/img cargo test --test it status_page`).
fn screenshot(browser: &mut Browser, page: &support::browser::Page, name: &str) {
    if let Some(dir) = std::env::var_os("LEASEHOLD_SCREENSHOTS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        browser.screenshot(page, &dir.join(name));
    }
}

/// The health the page shows for member `id` (`ok`, `down`, `unknown`).
fn member_health(id: u64) -> String {
    format!(
        "(document.querySelector('#members tr[data-member=\"{id}\"]') || {{dataset: {{}}}}).dataset.health"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_speakers_view_and_never_a_wrong_picture() {
    let mut browser = tokio::task::spawn_blocking(Browser::launch).await.unwrap();
    // The console check can fail: a script error is seen.
    let broken = browser.open("data:text/html,<script>no_such_function()</script>");
    browser.wait_for(
        &broken,
        "document.readyState === 'complete'",
        Duration::from_secs(10),
    );
    let _ = browser.text(&broken);
    assert!(
        browser
            .console
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("no_such_function")),
        "a script error must show"
    );
    browser.console.lock().unwrap().clear();

    let mut cluster = Cluster::start(3).await;
    let (speaker, term) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (page_node, doomed) = (others[0], others[1]);
    cluster
        .must_acquire(
            page_node,
            "page/taken-in-the-test",
            json!({"holder": "the-status-page-test", "lease_ms": 60000, "data": "the-data"}),
        )
        .await;

    // A lock whose lease ran out while its lock-delay keeps the name closed.
    cluster.wait_protocol(support::SPEAKS).await;
    cluster
        .must_acquire(
            speaker,
            "page/closed",
            json!({"holder": "gone", "lease_ms": 1000, "lock_delay_ms": 60000}),
        )
        .await;

    // Two readers hold a name together.
    for (via, reader) in [(page_node, "reader-one"), (speaker, "reader-two")] {
        cluster
            .must_acquire(
                via,
                "page/read-together",
                json!({"holder": reader, "lease_ms": 60000, "shared": true}),
            )
            .await;
    }

    // Two of three permits of a name are held.
    for (via, holder) in [(page_node, "permit-one"), (speaker, "permit-two")] {
        cluster
            .must_acquire(
                via,
                "page/permits",
                json!({"holder": holder, "lease_ms": 60000, "permits": 3}),
            )
            .await;
    }

    // A request waits for the lock for the whole test.
    let waiting = {
        let (http, url) = (
            cluster.http.clone(),
            cluster.url(speaker, "/v1/locks/acquire"),
        );
        tokio::spawn(async move {
            let body = json!({"name": "page/taken-in-the-test", "holder": "the-waiting-one", "wait_ms": 60000});
            let _ = http.post(url).json(&body).send().await;
        })
    };

    // Behind it, a set that asks for the lock together with a free name.
    let queued = |waiters: u64| {
        let cluster = &cluster;
        async move {
            for _ in 0..200 {
                let (_, lock) = cluster
                    .get(speaker, "/v1/locks/page%2Ftaken-in-the-test")
                    .await;
                if lock["lock"]["waiters"] == json!(waiters) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("{waiters} requests never waited for page/taken-in-the-test");
        }
    };
    queued(1).await;
    let waiting_set = {
        let (http, url) = (
            cluster.http.clone(),
            cluster.url(page_node, "/v1/locks/acquire"),
        );
        tokio::spawn(async move {
            let body = json!({"names": ["page/taken-in-the-test", "page/set-free"], "holder": "the-waiting-set", "wait_ms": 60000});
            let _ = http.post(url).json(&body).send().await;
        })
    };
    queued(2).await;

    // The speaker's page and a follower's show the same, the speaker's view.
    let speaker_page = browser.open(&cluster.url(speaker, "/"));
    let page = browser.open(&cluster.url(page_node, "/"));
    let named = format!("speaker: node {speaker} · term {term}");
    for (node, p) in [(speaker, &speaker_page), (page_node, &page)] {
        let shown = browser.wait_for(
            p,
            &format!(
                "document.body.innerText.includes({named:?}) && \
                 document.body.innerText.includes('page/taken-in-the-test') && \
                 document.body.innerText.includes('grants/s') && \
                 document.querySelectorAll('#history tr').length > 0 && \
                 document.querySelector('#locks tr[data-lock=\"page/taken-in-the-test\"] td:nth-child(7)').textContent === '2' && \
                 document.querySelector('#locks tr[data-lock=\"page/taken-in-the-test\"] td:nth-child(7)').title.startsWith('1. the-waiting-one (node ') && \
                 document.querySelector('#locks tr[data-lock=\"page/taken-in-the-test\"] td:nth-child(7)').title.includes('\\n2. the-waiting-set (node ') && \
                 document.querySelector('#locks tr[data-lock=\"page/taken-in-the-test\"] td:nth-child(7)').title.endsWith(', together with page/set-free') && \
                 document.querySelector('#locks tr[data-lock=\"page/permits\"] td:nth-child(8)').textContent === 'permits 2/3' && \
                 document.querySelector('#locks tr[data-lock=\"page/permits\"] td:nth-child(8)').title.includes('permit-two (node ') && \
                 document.querySelector('#locks tr[data-lock=\"page/read-together\"] td:nth-child(8)').textContent === 'shared by 2' && \
                 document.querySelector('#locks tr[data-lock=\"page/read-together\"] td:nth-child(8)').title.includes('reader-two (node ') && \
                 document.querySelector('#locks tr[data-lock=\"page/closed\"] td:nth-child(6)').textContent.startsWith('closed ') && \
                 document.querySelector('#locks tr[data-lock=\"page/set-free\"] td:nth-child(2)').textContent.startsWith('(free, kept for') && \
                 document.querySelector('#locks tr[data-lock=\"page/set-free\"] td:nth-child(7)').textContent === '1' && \
                 document.querySelector('#locks tr[data-lock=\"page/set-free\"] td:nth-child(7)').title.startsWith('1. the-waiting-set (node ') && \
                 document.getElementById('lock-count').textContent.startsWith('4 held, 1 free name kept for waiting requests')"
            ),
            Duration::from_secs(20),
        );
        let text = browser.text(p);
        assert!(shown.is_some(), "node {node}'s page:\n{text}");
        assert!(
            text.contains(&format!("the speaker's view (node {speaker})")),
            "{text}"
        );
        if node == page_node {
            assert!(
                text.contains(&format!("read through node {page_node}")),
                "{text}"
            );
        }
        for addr in cluster.addrs.values() {
            assert!(
                text.contains(addr.as_str()),
                "member {addr} missing:\n{text}"
            );
        }
        assert!(text.contains("the-status-page-test"), "its holder:\n{text}");
        assert!(text.contains("the-data"), "its data:\n{text}");
        assert!(text.contains("grants/s"), "the grant rate:\n{text}");
        for id in cluster.live() {
            assert_eq!(browser.eval(p, &member_health(id)), json!("ok"), "{text}");
        }
    }

    screenshot(&mut browser, &page, "status-page.png");

    // A member dies: the follower's page shows it down within 3 s, and
    // never healthy from then on.
    cluster.kill(doomed);
    let down = browser.wait_for(
        &page,
        &format!("{} === 'down'", member_health(doomed)),
        Duration::from_secs(3),
    );
    assert!(
        down.is_some(),
        "dead member not shown down:\n{}",
        browser.text(&page)
    );
    for _ in 0..20 {
        let health = browser.eval(&page, &member_health(doomed));
        assert_ne!(
            health,
            json!("ok"),
            "dead member shown healthy:\n{}",
            browser.text(&page)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The speaker dies too: no quorum. The page's node answers its own
    // view, marked so; the list cannot be read, and the page says so
    // rather than "no locks held"; no dead member is shown healthy.
    cluster.kill(speaker);
    let failed = browser.wait_for(
        &page,
        "document.body.innerText.includes('could not read the locks')",
        Duration::from_secs(20),
    );
    let text = browser.text(&page);
    assert!(failed.is_some(), "a failed list not shown:\n{text}");
    assert!(
        !text.contains("no locks held"),
        "a failed list read as empty:\n{text}"
    );
    let own = browser.wait_for(
        &page,
        "document.body.innerText.includes(\"own view, not the speaker's\")",
        Duration::from_secs(20),
    );
    assert!(own.is_some(), "{}", browser.text(&page));
    for _ in 0..10 {
        for id in [speaker, doomed] {
            let health = browser.eval(&page, &member_health(id));
            assert_ne!(
                health,
                json!("ok"),
                "dead node {id} healthy:\n{}",
                browser.text(&page)
            );
        }
        let text = browser.text(&page);
        assert!(!text.contains("no locks held"), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The page's own node dies: a banner within 3 s.
    cluster.kill(page_node);
    let banner = browser.wait_for(
        &page,
        "document.getElementById('banner').style.display === 'block' && \
         document.body.innerText.includes('is not answering since')",
        Duration::from_secs(3),
    );
    assert!(banner.is_some(), "no banner:\n{}", browser.text(&page));
    screenshot(&mut browser, &page, "status-page-node-down.png");
    let text = browser.text(&page);
    assert!(!text.contains("no locks held"), "{text}");
    assert!(
        text.contains(&format!("as read from node {speaker}")),
        "the speaker's failovers are kept, marked:\n{text}"
    );

    waiting.abort();
    waiting_set.abort();
    let console = browser.console.lock().unwrap().clone();
    let errors: Vec<_> = console
        .iter()
        .filter(|l| l.starts_with("exception") || l.starts_with("console.error"))
        .collect();
    assert!(errors.is_empty(), "the page logged: {errors:#?}");
}
